// Package standin is a stand-in MPS control daemon and client: it takes
// the place of nvidia-cuda-mps-control where no GPU is: for fake GPUs (`dra-kubelet-plugin mps-daemon --simulate`)
// and in a mock driver root (hack/mock-driver-root, whose
// nvidia-cuda-mps-control is Main). It was written from NVIDIA's
// documentation and from projects that run the real tool on r615 (see
// /work/shared/notes/NVIDIA-FACTS.md and docs/nvml.md, "The stand-in MPS
// control"), not from the plugin's code, and it is as strict as they say
// the real tool is: TestStandInRules (standin_test.go) lists every rule
// with its source and checks each. It keeps the state of the commands (legacy
// servers and defaults; MPS v3 servers, namespaces and clients), logs every
// command with how it was given to <log directory>/control.log, and never
// starts an MPS server or enforces anything.
//
// Its wire format between the client (the CLI) and the daemon is its own
// (NVIDIA's is not public): one JSON request per connection, one JSON reply.
// The client-side command line behaves like the real binary's.
//
// Switches, read by the daemon at start (environment of the -d/-f process):
//
//	TANGRAM_STANDIN_MPS_CSV_SPELLING=hyphen|underscore
//	    how multi-word CSV columns are spelled (pipe-directory or
//	    pipe_directory); NVIDIA's page spells hyphens, KAI reads
//	    underscores: unconfirmed, default hyphen.
//	TANGRAM_STANDIN_MPS_STDIN_EOF=exit|ignore
//	    whether a -f daemon exits when its standard input reaches end of
//	    file (KAI's report for r615; unconfirmed for r620), default exit.
//	TANGRAM_STANDIN_MPS_HANG=<command>[,<command>...]
//	    commands that never answer, for deadline tests: "<module> <verb>"
//	    for MPS v3 (e.g. "namespace set"), the verb for legacy commands
//	    (e.g. "get_server_list"), "quit" for -q / quit. The connection is
//	    held until the daemon stops; other commands are still served. The
//	    file <log directory>/standin-hang, in the same form, is read at
//	    every command, so a running daemon can be made to hang (and stop
//	    hanging) from outside.
//
// A test attaches an MPS client to a namespace with the stand-in's own
// command `nvidia-cuda-mps-control standin attach-client <namespace>
// --server=<server> [--pid=<pid>]` (the real binary has no such command: a
// real client attaches by connecting to the namespace's pipe directory).
//
// `nvidia-cuda-mps-control standin client` plays a CUDA program starting
// under classic MPS, with what NVIDIA documents and a GPU run showed such a
// client needs (rules classic-client-*):
//
//   - it reaches the control daemon only through the daemon's own pipe
//     directory (CUDA_MPS_PIPE_DIRECTORY);
//   - it needs nothing of the MPS server's /dev/shm: on a GPU (driver
//     r580, docs/gpu-reports/2026-11-27-h200-r580-experiments.md) clients
//     with a /dev/shm of their own, a fresh tmpfs or another directory,
//     were served and limited, and no client nor server created a file in
//     /dev/shm or in the pipe directory, so the stand-in creates none;
//   - the daemon serves it by an MPS server of its UID: without multi-user
//     mode (-M) a server runs as the UID of the client it was started for,
//     and a client of another UID is queued until that server's clients
//     are all done, then gets a new server of its own UID
//     (nvidia-cuda-mps-control(1), DESCRIPTION; the GPU run saw a uid 1000
//     client wait 13 s for a root client); with -M one server serves
//     clients of every UID at once.
//
// The client stays connected (counts as the server's client) while it
// holds, then leaves. Its view of a container is given by the environment:
//
//	CUDA_MPS_PIPE_DIRECTORY              the pipe directory it sees
//	TANGRAM_STANDIN_MPS_CLIENT_SHM       the directory its /dev/shm is
//	                                     (default /dev/shm): it must exist
//	                                     and is left as it was
//	TANGRAM_STANDIN_MPS_CLIENT_UID       its UID (default: the process's)
//	TANGRAM_STANDIN_MPS_CLIENT_HOLD      how long it keeps its context once
//	                                     served: a Go duration, or "stdin"
//	                                     (until its standard input ends);
//	                                     default: it leaves at once
//	TANGRAM_STANDIN_MPS_CLIENT_PIPE_RO=1 its pipe directory is a read-only
//	                                     mount (writes there fail)
//	TANGRAM_STANDIN_MPS_CLIENT_WRITES_PIPE=1
//	                                     the client creates an entry in the
//	                                     pipe directory: a real classic
//	                                     client did not on r580 (default
//	                                     no); the switch plays a driver
//	                                     that would, on which a read-only
//	                                     pipe mount fails.
package standin
