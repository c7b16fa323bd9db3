package store_test

import "fmt"

// runHelper runs one helper mode in a subprocess (see runSubprocess) and returns the exit code.
func runHelper(mode string) int {
	fmt.Printf("FAIL: unknown helper mode %q\n", mode)
	return 1
}
