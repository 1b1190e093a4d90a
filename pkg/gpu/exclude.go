package gpu

// Excluder names GPUs that must not be given to pods even though they are
// free, such as GPUs that report hardware errors. A front end that knows of
// such GPUs (the GPUTelemetry plugin's health view) sets it in the Request;
// Check leaves the GPUs out, and the ledger and the policies are unaware of it.
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
