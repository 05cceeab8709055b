// Package ndr is a binary search for the highest rate whose loss stays
// within a bound, and the verification trials that confirm the rate it
// finds: RFC 2544's throughput, FD.io CSIT's NDR (no loss) and PDR (a
// partial loss).
//
// The caller's trial function owns the traffic: it offers a rate however
// and for as long as it likes and reports, as an Outcome, what it offered
// and lost; its own record type carries whatever else it measured, and the
// results hold those records. The search makes no assumptions of time: it
// neither sleeps nor reads a clock, so it is a pure function of the trials'
// answers, and a model DUT drives it in tests.
package ndr
