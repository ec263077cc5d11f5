// cuda-alloc: the workload of `make gpu-acceptance`. It loads the CUDA
// driver (libcuda.so.1, injected into the container by the CDI spec) with
// dlopen, so it builds with nothing but gcc, and reports what the container
// can see and allocate:
//
//   cuda-alloc TRY_MIB
//
// creates a context on device 0 and allocates TRY_MIB in 256 MiB pieces,
// stopping at the first refusal. It prints one line the acceptance script
// parses:
//
//   cuda-alloc: devices=N total_mib=T free_mib=F allocated_mib=A refused=0|1 error=E
//
// Exit 0 when CUDA answered (whether or not an allocation was refused), 2
// when the driver cannot be loaded or initialised, 64 on bad arguments.
// With CUDA_ALLOC_HOLD_SECONDS=N it keeps its context and allocations for
// N seconds after that line (gpu-check's first client, beside which a
// client of another user must be served).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

#define PIECE_MIB 256ULL

static void *sym(void *lib, const char *name) {
	void *p = dlsym(lib, name);
	if (p == NULL) {
		fprintf(stderr, "cuda-alloc: libcuda.so.1 has no %s\n", name);
		exit(2);
	}
	return p;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: cuda-alloc TRY_MIB\n");
		return 64;
	}
	char *end;
	unsigned long long try_mib = strtoull(argv[1], &end, 10);
	if (*end != '\0' || try_mib == 0) {
		fprintf(stderr, "cuda-alloc: TRY_MIB %s is not a positive number\n", argv[1]);
		return 64;
	}

	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (lib == NULL) {
		fprintf(stderr, "cuda-alloc: cannot load the CUDA driver: %s\n", dlerror());
		return 2;
	}
	CUresult (*cuInit)(unsigned) = sym(lib, "cuInit");
	CUresult (*cuDeviceGetCount)(int *) = sym(lib, "cuDeviceGetCount");
	CUresult (*cuDeviceGet)(CUdevice *, int) = sym(lib, "cuDeviceGet");
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = sym(lib, "cuCtxCreate_v2");
	CUresult (*cuMemGetInfo)(size_t *, size_t *) = sym(lib, "cuMemGetInfo_v2");
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = sym(lib, "cuMemAlloc_v2");

	CUresult rc = cuInit(0);
	if (rc != 0) {
		fprintf(stderr, "cuda-alloc: cuInit failed with CUresult %d\n", rc);
		return 2;
	}
	int count = 0;
	CUdevice dev;
	CUcontext ctx;
	if ((rc = cuDeviceGetCount(&count)) != 0 || count < 1 || (rc = cuDeviceGet(&dev, 0)) != 0 ||
	    (rc = cuCtxCreate(&ctx, 0, dev)) != 0) {
		fprintf(stderr, "cuda-alloc: no usable device (devices=%d, CUresult %d)\n", count, rc);
		return 2;
	}
	size_t free_b = 0, total_b = 0;
	cuMemGetInfo(&free_b, &total_b);

	unsigned long long allocated = 0;
	int refused = 0;
	CUresult err = 0;
	while (allocated < try_mib) {
		unsigned long long piece = try_mib - allocated < PIECE_MIB ? try_mib - allocated : PIECE_MIB;
		CUdeviceptr p;
		err = cuMemAlloc(&p, (size_t)(piece << 20));
		if (err != 0) {
			refused = 1;
			break;
		}
		allocated += piece;
	}
	// The pieces are freed when the process exits.
	printf("cuda-alloc: devices=%d total_mib=%zu free_mib=%zu allocated_mib=%llu refused=%d error=%d\n", count,
	       total_b >> 20, free_b >> 20, allocated, refused, err);
	fflush(stdout);
	const char *hold = getenv("CUDA_ALLOC_HOLD_SECONDS");
	if (hold != NULL && atoi(hold) > 0) {
		sleep((unsigned)atoi(hold));
	}
	return 0;
}
