package gpu

import "context"

// NoGPUInstance is Process.GPUInstance of a process outside any MIG
// instance.
const NoGPUInstance = -1

// Process is one process NVML reports running on a card: a compute
// process or an MPS client (nvmlDeviceGetComputeRunningProcesses_v3,
// nvmlDeviceGetMPSComputeRunningProcesses_v3).
type Process struct {
	// Card is the UUID of the card the process runs on (the parent card
	// for a process in a MIG instance).
	Card string
	// GPUInstance is the MIG GPU instance it runs in, NoGPUInstance
	// outside MIG.
	GPUInstance int
	// PID is in the host's PID namespace, as NVML gives it.
	PID int
	// UsedBytes is its GPU memory, negative when NVML says it is not
	// available (NVIDIA documents that it may not be).
	UsedBytes int64
	// MPSClient: NVML listed it among the card's MPS clients.
	MPSClient bool
	// SMPercent is the part of the card's streaming multiprocessors it
	// kept busy since the previous list, NVML's samples averaged, when
	// SMKnown (nvmlDeviceGetProcessUtilization): NVML does not give it in
	// MIG mode or on cards that do not support it, and an MPS client it
	// did not sample is not known either.
	SMPercent int
	SMKnown   bool
}

// ProcessLister lists the processes running on the node's cards. It is
// optional: NVML's Source has it, fake GPUs run nothing. A card NVML
// cannot list is left out and named in the error, with the other cards'
// processes still returned.
type ProcessLister interface {
	GPUProcesses(ctx context.Context) ([]Process, error)
}
