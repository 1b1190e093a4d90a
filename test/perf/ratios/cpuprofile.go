package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
)

// The CPU the benchmark process spent in a run's measured phase, read from
// the CPU profile scheduler_perf writes for it (-perf-cpuprofile: started
// when the measured pods are created, stopped when they are placed). Two
// test cases of one workload place the same pods, so the ratio of their CPU
// says whether a difference in pods/s is work the process did (the two
// ratios agree) or time it spent waiting (they do not). etcd runs in its
// own process and is not counted.

// readCPUProfile returns the CPU time (seconds) a gzipped pprof CPU
// profile holds: the sum of its samples' "cpu" values, in nanoseconds.
func readCPUProfile(r io.Reader) (float64, error) {
	z, err := gzip.NewReader(r)
	if err != nil {
		return 0, fmt.Errorf("CPU profile: %w", err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return 0, fmt.Errorf("CPU profile: %w", err)
	}
	// Profile (github.com/google/pprof's profile.proto): sample_type = 1
	// (ValueType: type = 1, unit = 2, indices into string_table), sample =
	// 2 (Sample: value = 2, packed or not), string_table = 6.
	var types [][2]int64
	var samples [][]int64
	var strs []string
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var vt [2]int64
			err := eachField(v, func(n protowire.Number, t protowire.Type, x []byte) error {
				if (n == 1 || n == 2) && t == protowire.VarintType {
					u, _ := protowire.ConsumeVarint(x)
					vt[n-1] = int64(u)
				}
				return nil
			})
			types = append(types, vt)
			return err
		case num == 2 && typ == protowire.BytesType:
			var values []int64
			err := eachField(v, func(n protowire.Number, t protowire.Type, x []byte) error {
				if n != 2 {
					return nil
				}
				if t == protowire.VarintType {
					u, _ := protowire.ConsumeVarint(x)
					values = append(values, int64(u))
					return nil
				}
				for len(x) > 0 { // packed
					u, k := protowire.ConsumeVarint(x)
					if k < 0 {
						return protowire.ParseError(k)
					}
					values, x = append(values, int64(u)), x[k:]
				}
				return nil
			})
			samples = append(samples, values)
			return err
		case num == 6 && typ == protowire.BytesType:
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("CPU profile: %w", err)
	}
	column := -1
	for i, vt := range types {
		if vt[0] >= 0 && vt[0] < int64(len(strs)) && vt[1] >= 0 && vt[1] < int64(len(strs)) &&
			strs[vt[0]] == "cpu" && strs[vt[1]] == "nanoseconds" {
			column = i
		}
	}
	if column < 0 {
		return 0, fmt.Errorf("CPU profile: no sample type cpu/nanoseconds")
	}
	var ns int64
	for _, s := range samples {
		if column < len(s) {
			ns += s[column]
		}
	}
	return float64(ns) / 1e9, nil
}

// eachField calls f with each field of the protobuf message b: its number,
// wire type, and its value's bytes (a varint's encoding, a length-delimited
// field's contents).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			x, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			v, n = x, k
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readCPUProfileDir is the CPU of the one CPU profile a run left in dir;
// NaN when there is none (the run was not asked for one).
func readCPUProfileDir(dir string) (float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*-cpu.prof"))
	if err != nil || len(files) == 0 {
		return math.NaN(), err
	}
	if len(files) != 1 {
		return math.NaN(), fmt.Errorf("%s: want one CPU profile, found %d", dir, len(files))
	}
	f, err := os.Open(files[0])
	if err != nil {
		return math.NaN(), err
	}
	defer f.Close()
	return readCPUProfile(f)
}
