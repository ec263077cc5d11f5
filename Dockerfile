# syntax=docker/dockerfile:1
# Tangram's images for people who build with Docker or buildx. Every build
# stage runs hack/images/build-images.sh, the script behind `make images`, so
# both build the same binaries on the same bases (hack/images/dockerfile_test.go
# checks that every image of the script has its stage here).
#
#   docker buildx build --target dra-kubelet-plugin -t REGISTRY/tangram/dra-kubelet-plugin:TAG --push .
#   docker buildx build --target archives --output type=local,dest=_output/images \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) .
# The first pushes an image built by buildx (same files, its own layer
# digests); the second writes the very OCI archives `make images` writes,
# digest for digest (docs/install.md, "Images").
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS builder
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/tangram-scheduler/go.mod cmd/tangram-scheduler/go.sum cmd/tangram-scheduler/
RUN go mod download && cd cmd/tangram-scheduler && go mod download
COPY . .
# Times inside the images; empty = the last commit's, 0 without .git.
ARG SOURCE_DATE_EPOCH
ARG IMAGE_TAG=dev
ENV SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} IMAGE_TAG=${IMAGE_TAG}

# --- one build stage per image, each calling the script for its image ---
FROM builder AS build-dra-kubelet-plugin
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --only dra-kubelet-plugin --out /out --export-rootfs /rootfs

FROM builder AS build-dra-controller
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --only dra-controller --out /out --export-rootfs /rootfs

FROM builder AS build-tangram-scheduler
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --only tangram-scheduler --out /out --export-rootfs /rootfs

FROM builder AS build-gpu-info
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --only gpu-info --out /out --export-rootfs /rootfs

FROM builder AS build-pause
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --only pause --out /out --export-rootfs /rootfs

# --- the images: each the file system the script assembled ---
# The kubelet plugin: cgo build on glibc from Debian (NVML); --fake-profile
# runs it without GPUs.
FROM scratch AS dra-kubelet-plugin
COPY --from=build-dra-kubelet-plugin /rootfs/dra-kubelet-plugin/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin:/
WORKDIR /
ENTRYPOINT ["/dra-kubelet-plugin"]

FROM scratch AS dra-controller
COPY --from=build-dra-controller /rootfs/dra-controller/ /
ENV PATH=/
WORKDIR /
ENTRYPOINT ["/dra-controller"]

FROM scratch AS tangram-scheduler
COPY --from=build-tangram-scheduler /rootfs/tangram-scheduler/ /
ENV PATH=/
WORKDIR /
ENTRYPOINT ["/tangram-scheduler"]

# The e2e and demo workload.
FROM scratch AS gpu-info
COPY --from=build-gpu-info /rootfs/gpu-info/ /
ENV PATH=/
WORKDIR /
ENTRYPOINT ["/gpu-info"]

# The local cluster's sandbox image.
FROM scratch AS pause
COPY --from=build-pause /rootfs/pause/ /
ENV PATH=/
WORKDIR /
ENTRYPOINT ["/pause"]

# --- every image as the OCI archive `make images` writes ---
FROM builder AS build-archives
RUN --mount=type=cache,target=/root/.cache \
    hack/images/build-images.sh --out /out

FROM scratch AS archives
COPY --from=build-archives /out/ /
