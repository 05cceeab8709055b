package report

import (
	"encoding/json"
	"os"
	"testing"
)

// syntheticWorkloads reads testdata/workloads.json: every workload of
// perf's table as a run records it (perf's TestReportWorkloadsTestdata
// keeps the file current), so the synthetic results have the workloads
// a whole run has, samples or not.
func syntheticWorkloads(t testing.TB) []WorkloadInfo {
	t.Helper()
	b, err := os.ReadFile("testdata/workloads.json")
	if err != nil {
		t.Fatal(err)
	}
	var ws []WorkloadInfo
	if err := json.Unmarshal(b, &ws); err != nil {
		t.Fatalf("testdata/workloads.json: %v", err)
	}
	return ws
}
