package main

import (
	"os"
	"testing"

	"github.com/peertrail/peertrail/store/chdb"
)

// mainEnv makes the test binary run as peertrail itself (TestMain), so that tests can run the
// command line in a process of its own: the demo, the CLI table.
const mainEnv = "PEERTRAIL_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Args = append([]string{"peertrail"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

// requireEngine fails the test when the embedded engine's library is not at hand.
func requireEngine(t *testing.T) {
	t.Helper()
	if _, err := chdb.FindLibrary(""); err != nil {
		t.Fatalf("the embedded engine is required (run scripts/fetch-chdb.sh; chDB %s): %v", chdb.Version, err)
	}
}
