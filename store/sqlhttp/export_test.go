package sqlhttp

// Unchecked makes p skip its Policy, so that a test can give it a read the Policy would refuse
// and see what the pool itself does with it.
func Unchecked(p *ReadPool) { p.unchecked = true }
