package nri

import "time"

// Hold blocks every handler of p that reads or changes its view of
// containers until the returned function is called: a stuck agent, for
// tests.
func (p *Plugin) Hold() (release func()) {
	p.mu.Lock()
	return p.mu.Unlock
}

// SetUnconfirmedHold shortens how long an unconfirmed creation holds GPUs.
func (p *Plugin) SetUnconfirmedHold(d time.Duration) { p.unconfirmedHold = d }
