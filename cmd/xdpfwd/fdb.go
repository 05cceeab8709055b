// `xdpfwd fdb`: a client of a running switch's /fdb endpoint, next to its
// --metrics.

package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/metrics"
)

// cmdFDB prints a running switch's forwarding database, read from the
// /fdb endpoint next to its --metrics.
func cmdFDB(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fdb", flag.ContinueOnError)
	addr := fs.String("metrics", "", "the daemon's --metrics address, `ADDR`: HOST:PORT or a URL (required)")
	asJSON := fs.Bool("json", false, "print the JSON the daemon serves")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *addr == "" {
		return usageError{"fdb: --metrics ADDR is required: the address given to 'xdpfwd run --mode switch --metrics'"}
	}
	u, err := metricsURL(*addr)
	if err != nil {
		return usageError{fmt.Sprintf("fdb: --metrics %q: %v", *addr, err)}
	}
	u.Path = "/fdb"
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(u.String())
	if err != nil {
		return fmt.Errorf("fdb: %w (is 'xdpfwd run --mode switch --metrics %s' running?)", err, *addr)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("fdb: %s has no forwarding database: the daemon does not run --mode switch", u)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fdb: %s: %s", u, resp.Status)
	}
	var d metrics.FDBDump
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return fmt.Errorf("fdb: %s: %w", u, err)
	}
	// The daemon streams its table in table order; sorting is the
	// client's work.
	slices.SortFunc(d.Entries, func(a, b fdb.Entry) int {
		return cmp.Or(cmp.Compare(a.VLAN, b.VLAN), slices.Compare(a.MAC, b.MAC))
	})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MAC\tVLAN\tLINK\tAGE")
	for _, e := range d.Entries {
		age := "static"
		if !e.Static {
			age = e.Age.Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", e.MAC, e.VLAN, e.Link, age)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d entries of %d; learned %d, moved %d, evicted %d\n",
		len(d.Entries), d.Stats.Size, d.Stats.Learned, d.Stats.Moves, d.Stats.Evictions)
	return nil
}
