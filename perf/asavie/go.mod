module github.com/xdpfwd/xdpfwd/perf/asavie

go 1.26

require (
	github.com/asavie/xdp v0.3.3
	github.com/vishvananda/netlink v1.1.0
	golang.org/x/sys v0.0.0-20210324051608-47abb6519492
)

require (
	github.com/cilium/ebpf v0.4.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
)
