// Package topo builds the throw-away network topologies that xdpfwd's demos,
// tests and benchmarks run on, and drives traffic across them.
//
// A Pair is two named network namespaces, A and B, each joined to the root
// namespace by a veth pair. The root-side ends are where a forwarder (xdpfwd,
// a Linux bridge, an XDP redirect program) is attached; without one, A and B
// cannot reach each other. TCPTransfer, UDPBurst and Ping generate bounded,
// verifiable traffic between the namespaces; SendFrames sends raw Ethernet
// frames of chosen lengths, jumbo frames included, and checks them byte for
// byte; VLANFrames sends 802.1Q-tagged frames, which needs no VLAN interface
// support in the kernel, and OffloadedVLANFrames sends frames whose tag rides
// in skb metadata, as a VLAN device's does with the veth's default TX VLAN
// offload (a TC program on the sender adds it).
//
// The package owns only what it creates: every namespace and link carries a
// random per-pair prefix, and cleanup never touches links or namespaces it did
// not create, even if they share a name pattern.
package topo
