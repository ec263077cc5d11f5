package gpucheck

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// AllocResult is what hack/gpu-acceptance/cuda-alloc/cuda-alloc.c reports, from inside a
// pod (make gpu-acceptance) or as an MPS client (gpu-check): how many devices CUDA sees and how much of TRY_MIB it could allocate.
type AllocResult struct {
	Devices      int
	TotalMiB     int64
	FreeMiB      int64
	AllocatedMiB int64
	Refused      bool
	Error        int // CUresult of the refused allocation
}

const allocPrefix = "cuda-alloc: devices="

// ParseAllocLog finds cuda-alloc's result line in its output.
func ParseAllocLog(log string) (AllocResult, error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, allocPrefix) {
			continue
		}
		var r AllocResult
		fields := map[string]string{}
		for _, kv := range strings.Fields(strings.TrimPrefix(line, "cuda-alloc: ")) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		var err error
		num := func(key string) int64 {
			if err != nil {
				return 0
			}
			var n int64
			n, err = strconv.ParseInt(fields[key], 10, 64)
			if err != nil {
				err = fmt.Errorf("cuda-alloc line %q: %s: %w", line, key, err)
			}
			return n
		}
		r.Devices = int(num("devices"))
		r.TotalMiB, r.FreeMiB, r.AllocatedMiB = num("total_mib"), num("free_mib"), num("allocated_mib")
		r.Refused = num("refused") == 1
		r.Error = int(num("error"))
		return r, err
	}
	return AllocResult{}, fmt.Errorf("no %q line in the output (did the CUDA driver load? the output says: %q)", allocPrefix, strings.TrimSpace(log))
}
