package trace

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// ConstrainOptions make a model-constrained variant of a pod list: the FGD
// authors' method for their gpuspec lists, with a seed.
type ConstrainOptions struct {
	// Pods is the pod list to constrain (CSV), and Like the lists whose
	// model-limited pods give the models to draw from (gpu_spec).
	Pods string
	Like []string
	// Nodes is the cluster: a pod is given only models of which some node
	// has as many GPUs as the pod asks for.
	Nodes string
	// Fraction is the share of the GPU pods limited to models in the
	// variant, those limited already included; 0..1.
	Fraction float64
	Seed     uint64
}

// specShape groups pods for drawing models: a pod gets the models of a
// like list's pod of its shape, as the trace pairs models with shapes
// (shares go to the models that share GPUs, eight-GPU pods to the models
// of eight-GPU nodes).
func specShape(d *gpu.Demand) string {
	switch {
	case d.IsShare():
		return "share"
	case d.Count == 1:
		return "one GPU"
	}
	return "several GPUs"
}

// Constrain writes opts.Pods to w as CSV, each row as it was, with
// gpu_spec set on a random round(Fraction × GPU pods) − (pods limited
// already) of the GPU pods not yet limited: each gets the models of a pod
// drawn at random from the Like lists' limited pods of its shape whose
// models some node can host it on (of any shape when none of its shape
// can). The draw keeps the like lists' proportions of models per shape.
// gpu_spec is added as the last column when the list has none.
func Constrain(opts ConstrainOptions, w io.Writer) error {
	if !(opts.Fraction >= 0 && opts.Fraction <= 1) {
		return fmt.Errorf("--fraction %v: want a share of the GPU pods in 0..1", opts.Fraction)
	}
	data, err := os.ReadFile(opts.Pods)
	if err != nil {
		return err
	}
	if !isCSV(opts.Pods) {
		return fmt.Errorf("--pods %s: want a pod list in CSV", opts.Pods)
	}
	pods, err := podsFromCSV(opts.Pods, data)
	if err != nil {
		return err
	}
	nodes, err := LoadNodes(opts.Nodes)
	if err != nil {
		return err
	}
	mostGPUs := map[string]int{} // model (lower case) → the most GPUs of a node
	for _, n := range nodes {
		inv, err := gpu.InventoryFromNode(n)
		if err != nil {
			continue
		}
		onNode := map[string]int{}
		for _, dev := range inv.Devices {
			onNode[strings.ToLower(dev.Model)]++
		}
		for m, g := range onNode {
			mostGPUs[m] = max(mostGPUs[m], g)
		}
	}
	hosts := func(d gpu.Demand, models []string) bool {
		for _, m := range models {
			if mostGPUs[strings.ToLower(m)] >= d.Count {
				return true
			}
		}
		return false
	}
	specs := map[string][][]string{} // shape → the like lists' models, one entry per pod
	var all [][]string
	for _, file := range opts.Like {
		like, err := LoadPods(file)
		if err != nil {
			return err
		}
		for _, p := range like {
			if d, err := gpu.DemandFromPod(p.Pod); err == nil && len(d.Models) > 0 && d.Count > 0 {
				specs[specShape(&d)] = append(specs[specShape(&d)], d.Models)
				all = append(all, d.Models)
			}
		}
	}
	var free []int // the GPU pods not limited yet
	var gpuPods, limited int
	demands := make([]gpu.Demand, len(pods))
	for i, p := range pods {
		d, err := gpu.DemandFromPod(p.Pod)
		if err != nil || d.Count == 0 {
			continue
		}
		demands[i] = d
		gpuPods++
		if len(d.Models) > 0 {
			limited++
		} else {
			free = append(free, i)
		}
	}
	target := int(math.Round(opts.Fraction * float64(gpuPods)))
	if target < limited {
		return fmt.Errorf("--fraction %v: %s has %d of its %d GPU pods limited to models already, more than %d", opts.Fraction, opts.Pods, limited, gpuPods, target)
	}
	if target > limited && len(all) == 0 {
		return fmt.Errorf("--like %s: no pod limited to GPU models (gpu_spec) to draw models from", strings.Join(opts.Like, ","))
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6770757370656373)) // "gpuspecs"
	rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	spec := map[int]string{} // row → its new gpu_spec
	for _, i := range free[:target-limited] {
		d := demands[i]
		var pool [][]string
		for _, models := range specs[specShape(&d)] {
			if hosts(d, models) {
				pool = append(pool, models)
			}
		}
		if len(pool) == 0 {
			for _, models := range all {
				if hosts(d, models) {
					pool = append(pool, models)
				}
			}
		}
		if len(pool) == 0 {
			return fmt.Errorf("pod %s (%s): no models in --like that a node of --nodes can host it on", pods[i].Pod.Name, d.String())
		}
		spec[i] = strings.Join(pool[rng.IntN(len(pool))], "|")
	}
	return writeConstrained(data, spec, w)
}

// writeConstrained copies the CSV in data to w, setting gpu_spec on the
// rows (0 is the first after the header) in spec. A row with more or fewer
// fields than the header is refused, and then nothing is written.
func writeConstrained(data []byte, spec map[int]string, w io.Writer) error {
	var buf bytes.Buffer
	if err := copyConstrained(data, spec, &buf); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func copyConstrained(data []byte, spec map[int]string, w io.Writer) error {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return err
	}
	// The last gpu_spec column, as the simulator reads it (csvTable).
	col := -1
	for i, h := range header {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) == "gpu_spec" {
			col = i
		}
	}
	fields := len(header)
	if col < 0 {
		col = len(header)
		header = append(header, "gpu_spec")
	}
	out := csv.NewWriter(w)
	if err := out.Write(header); err != nil {
		return err
	}
	for row := 0; ; row++ {
		record, err := r.Read()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		if len(record) != fields {
			line, _ := r.FieldPos(0)
			return fmt.Errorf("%d fields on line %d: want %d, one per header column", len(record), line, fields)
		}
		for len(record) <= col {
			record = append(record, "")
		}
		if s, ok := spec[row]; ok {
			record[col] = s
		}
		if err := out.Write(record); err != nil {
			return err
		}
	}
	out.Flush()
	return out.Error()
}
