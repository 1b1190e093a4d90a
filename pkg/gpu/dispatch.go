package gpu

// choose and score call the policy's strategy. The registry's own
// strategies are called through their concrete types: a call through the
// Strategy interface makes the compiler assume req escapes, which would
// cost every front end a heap allocation per node and request (Place and
// Score run for every feasible node of every cycle). Another strategy is
// called through the interface with a copy of the request.

func (p *Policy) choose(n *NodeGPUs, req *Request, candidates DeviceSet) DeviceSet {
	switch s := p.strategy.(type) {
	case bestFit:
		return s.Choose(n, req, candidates)
	case spread:
		return s.Choose(n, req, candidates)
	case packing:
		return s.Choose(n, req, candidates)
	case fgd:
		return s.Choose(n, req, candidates)
	case fragFit:
		return s.Choose(n, req, candidates)
	case randomPolicy:
		return s.Choose(n, req, candidates)
	case dotProd:
		return s.Choose(n, req, candidates)
	case gpuClustering:
		return s.Choose(n, req, candidates)
	case gpuPacking:
		return s.Choose(n, req, candidates)
	case bestFitCPUGPU:
		return s.Choose(n, req, candidates)
	}
	r := *req
	return p.strategy.Choose(n, &r, candidates)
}

func (p *Policy) score(n *NodeGPUs, req *Request, chosen DeviceSet) int64 {
	switch s := p.strategy.(type) {
	case bestFit:
		return s.Score(n, req, chosen)
	case spread:
		return s.Score(n, req, chosen)
	case packing:
		return s.Score(n, req, chosen)
	case fgd:
		return s.Score(n, req, chosen)
	case fragFit:
		return s.Score(n, req, chosen)
	case randomPolicy:
		return s.Score(n, req, chosen)
	case dotProd:
		return s.Score(n, req, chosen)
	case gpuClustering:
		return s.Score(n, req, chosen)
	case gpuPacking:
		return s.Score(n, req, chosen)
	case bestFitCPUGPU:
		return s.Score(n, req, chosen)
	}
	r := *req
	return p.strategy.Score(n, &r, chosen)
}
