package sqlhttp

import "testing"

// TestReadMemoryLeavesTheWriterHalfTheEngine: without a configured limit one read may use
// 1 GiB, or, when the engine's cap is small, what keeps the reads at once to half of it.
func TestReadMemoryLeavesTheWriterHalfTheEngine(t *testing.T) {
	const gi = 1 << 30
	for _, tc := range []struct {
		in   ReadLimits
		want int64
	}{
		{ReadLimits{}, gi},                                            // engine cap unknown
		{ReadLimits{EngineMemory: 12 * gi}, gi},                       // a big engine
		{ReadLimits{EngineMemory: 2 * gi}, gi / 2},                    // a 4 GiB pod: two reads take 1 GiB of 2
		{ReadLimits{EngineMemory: gi / 2}, gi / 8},                    // a 1 GiB budget
		{ReadLimits{EngineMemory: 2 * gi, MaxConcurrent: 4}, gi / 4},  // more reads, less each
		{ReadLimits{EngineMemory: 2 * gi, MaxMemory: 3 * gi}, 3 * gi}, // configured: as given
	} {
		l := tc.in
		l.defaults()
		if l.MaxMemory != tc.want {
			t.Errorf("%+v: %d, want %d", tc.in, l.MaxMemory, tc.want)
		}
	}
}
