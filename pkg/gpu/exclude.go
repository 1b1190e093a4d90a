package gpu

// Excluder names GPUs that must not be given to pods even though they are
// free, such as GPUs that report hardware errors. A front end that knows of
// such GPUs (the GPUTelemetry plugin's health view) passes an Excluder to the
// placement functions below; the ledger and the policies are unaware of it.
type Excluder interface {
	// Excluded returns the positions in inv of node's GPUs that must not be
	// given to pods, and a short human-readable reason naming them; (0, "")
	// when there are none. It must not block.
	Excluded(node string, inv *Inventory) (DeviceSet, string)
}

// excludedOf asks e about n's GPUs; a nil e or a node without inventory
// excludes nothing.
func excludedOf(e Excluder, n *NodeGPUs) (DeviceSet, string) {
	if e == nil || n.Inventory == nil {
		return 0, ""
	}
	return e.Excluded(n.Name, n.Inventory)
}

// CandidatesExcluding is Candidates without the GPUs e excludes. When the
// demand fits n's free GPUs but not once the excluded ones are left out, it
// returns no Reasons and a non-empty why that names the excluded GPUs; the
// caller reports it as the cause. When the demand does not fit n at all, the
// reasons are Candidates' own.
func CandidatesExcluding(n *NodeGPUs, d *Demand, e Excluder) (candidates DeviceSet, reasons Reasons, why string) {
	candidates, reasons = Candidates(n, d)
	if reasons != 0 {
		return candidates, reasons, ""
	}
	excluded, text := excludedOf(e, n)
	if excluded == 0 {
		return candidates, 0, ""
	}
	if kept := candidates &^ excluded; kept.Len() < d.Count {
		return kept, 0, text
	}
	return candidates &^ excluded, 0, ""
}

// PlaceHostExcluding is PlaceHost choosing only among the GPUs e does not
// exclude. why is as CandidatesExcluding returns it; chosen is 0 whenever
// reasons or why is set.
func PlaceHostExcluding(n *NodeGPUs, h Host, d *Demand, policy Policy, e Excluder) (chosen DeviceSet, reasons Reasons, why string) {
	if e == nil {
		chosen, reasons = PlaceHost(n, h, d, policy)
		return chosen, reasons, ""
	}
	candidates, reasons, why := CandidatesExcluding(n, d, e)
	if reasons != 0 || why != "" {
		return 0, reasons, why
	}
	if hc, ok := policy.(HostChooser); ok {
		return hc.ChooseHost(n, h, d, candidates), 0, ""
	}
	return policy.Choose(n, d, candidates), 0, ""
}
