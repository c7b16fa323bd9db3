package chdb

// CallThreadIDs returns the ids of the threads that run Go code into the engine: the engine's
// and its sessions' (the ones the idler must leave alone).
func CallThreadIDs(e *Engine) []int {
	e.idle.mu.Lock()
	defer e.idle.mu.Unlock()
	ids := make([]int, 0, len(e.idle.calls))
	for tid := range e.idle.calls {
		ids = append(ids, tid)
	}
	return ids
}
