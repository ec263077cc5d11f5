// Package images holds the tests of the image build scripts: the Dockerfile
// must build every image of build-images.sh, through that script.
package images

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// image is one line of `build-images.sh --list`.
type image struct {
	name, ref, entrypoint, base, pathEnv string
}

func listImages(t *testing.T) []image {
	t.Helper()
	out, err := exec.Command("bash", "build-images.sh", "--list").Output()
	if err != nil {
		t.Fatalf("build-images.sh --list: %v", err)
	}
	var images []image
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("build-images.sh --list line %q: want NAME REF ENTRYPOINT BASE PATH=...", line)
		}
		images = append(images, image{name: f[0], ref: f[1], entrypoint: f[2], base: f[3], pathEnv: f[4]})
	}
	return images
}

// stage is one FROM ... AS NAME section of a Dockerfile.
type stage struct {
	from         string
	instructions []string // each with continuation lines joined
}

var fromLine = regexp.MustCompile(`(?i)^FROM\s+(\S+)\s+AS\s+(\S+)$`)

func parseDockerfile(t *testing.T, text string) map[string]*stage {
	t.Helper()
	stages := map[string]*stage{}
	var cur *stage
	var pending string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if m := fromLine.FindStringSubmatch(line); m != nil {
			cur = &stage{from: m[1]}
			stages[m[2]] = cur
			continue
		}
		if cur != nil {
			cur.instructions = append(cur.instructions, strings.Join(strings.Fields(line), " "))
		}
	}
	return stages
}

func has(s *stage, want string) bool {
	for _, in := range s.instructions {
		if in == want {
			return true
		}
	}
	return false
}

// runsScript reports whether a stage runs build-images.sh with exactly
// these arguments after the script name.
func runsScript(s *stage, args string) bool {
	for _, in := range s.instructions {
		if strings.HasPrefix(in, "RUN ") && strings.HasSuffix(in, "hack/images/build-images.sh"+args) {
			return true
		}
	}
	return false
}

// checkDockerfile returns what is wrong with a Dockerfile for these images.
func checkDockerfile(t *testing.T, text string, images []image) []string {
	stages := parseDockerfile(t, text)
	var problems []string
	known := map[string]bool{}
	for _, img := range images {
		known[img.name] = true
		build, final := stages["build-"+img.name], stages[img.name]
		if build == nil || !runsScript(build, " --only "+img.name+" --out /out --export-rootfs /rootfs") {
			problems = append(problems, "no stage build-"+img.name+" running hack/images/build-images.sh --only "+img.name+" --out /out --export-rootfs /rootfs")
		}
		if final == nil || final.from != "scratch" {
			problems = append(problems, "no stage "+img.name+" FROM scratch")
			continue
		}
		for _, want := range []string{
			"COPY --from=build-" + img.name + " /rootfs/" + img.name + "/ /",
			"ENV " + img.pathEnv,
			`ENTRYPOINT ["` + img.entrypoint + `"]`,
		} {
			if !has(final, want) {
				problems = append(problems, "stage "+img.name+" lacks "+want)
			}
		}
	}
	for name, s := range stages {
		if s.from == "scratch" && name != "archives" && !known[name] {
			problems = append(problems, "stage "+name+" is an image build-images.sh does not build")
		}
		for _, in := range s.instructions {
			if strings.Contains(in, "go build") {
				problems = append(problems, "stage "+name+" compiles on its own ("+in+"); call hack/images/build-images.sh instead")
			}
		}
	}
	if a := stages["archives"]; a == nil || !has(a, "COPY --from=build-archives /out/ /") ||
		stages["build-archives"] == nil || !runsScript(stages["build-archives"], " --out /out") {
		problems = append(problems, "no stage archives copying every archive from build-archives, which runs hack/images/build-images.sh --out /out")
	}
	return problems
}

func TestDockerfileBuildsEveryImageThroughTheScript(t *testing.T) {
	images := listImages(t)
	for _, want := range []string{"dra-kubelet-plugin", "dra-controller", "tangram-scheduler", "gpu-info", "pause"} {
		found := false
		for _, img := range images {
			found = found || img.name == want
		}
		if !found {
			t.Errorf("build-images.sh --list lacks %s", want)
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkDockerfile(t, string(data), images) {
		t.Error("Dockerfile: " + p)
	}
}

// The check itself must catch a Dockerfile that drifted from the script.
func TestDockerfileCheckCatchesDrift(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(data)
	images := listImages(t)
	tests := []struct {
		name, old, new, wantProblem string
		extraImage                  *image
	}{
		{name: "image missing from the Dockerfile", extraImage: &image{name: "new-thing", entrypoint: "/new-thing", pathEnv: "PATH=/"}, wantProblem: "no stage build-new-thing"},
		{name: "stage compiles by itself", old: "hack/images/build-images.sh --only dra-controller --out /out --export-rootfs /rootfs",
			new: "CGO_ENABLED=0 go build -o /rootfs/dra-controller/dra-controller ./cmd/dra-controller", wantProblem: "compiles on its own"},
		{name: "other entrypoint", old: `ENTRYPOINT ["/dra-kubelet-plugin"]`, new: `ENTRYPOINT ["/bin/plugin"]`, wantProblem: "stage dra-kubelet-plugin lacks ENTRYPOINT"},
		{name: "other PATH", old: "ENV PATH=/usr/local/bin:/usr/bin:/bin:/", new: "ENV PATH=/", wantProblem: "stage dra-kubelet-plugin lacks ENV"},
		{name: "stale image stage", old: "FROM scratch AS pause", new: "FROM scratch AS pause\n\nFROM scratch AS old-image", wantProblem: "stage old-image is an image build-images.sh does not build"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, imgs := good, images
			if tc.old != "" {
				if !strings.Contains(text, tc.old) {
					t.Fatalf("the Dockerfile has no %q to change", tc.old)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			if tc.extraImage != nil {
				imgs = append(append([]image(nil), images...), *tc.extraImage)
			}
			problems := checkDockerfile(t, text, imgs)
			if !strings.Contains(strings.Join(problems, "\n"), tc.wantProblem) {
				t.Errorf("problems %q, want one mentioning %q", problems, tc.wantProblem)
			}
		})
	}
}

func TestBuildImagesRejectsUnknownImage(t *testing.T) {
	out, err := exec.Command("bash", "build-images.sh", "--only", "no-such-image").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--only no-such-image: no such image") {
		t.Fatalf("err = %v, output %q; want a refusal naming the image", err, out)
	}
}
