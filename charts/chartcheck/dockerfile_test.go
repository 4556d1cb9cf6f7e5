package chartcheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	dockerfilePath   = "../../Dockerfile"
	dockerignorePath = "../../.dockerignore"
	deployDocPath    = "../../docs/operations.md"
)

// The go build command of the image; docs/operations.md quotes it for CI so that
// CI and the image build the binary the same way.
var buildLine = regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*)$`)

// TestDockerfile checks the Dockerfile statically (there is no Docker engine
// on the build machines).
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	var froms []string
	stageStart := 0
	lines := strings.Split(df, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			froms = append(froms, l)
			stageStart = i
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM lines %v", froms)
	}
	for _, f := range froms {
		image := strings.Fields(f)[1]
		if image == "scratch" {
			continue
		}
		if strings.HasSuffix(image, ":latest") || !strings.Contains(image, ":") {
			t.Errorf("base image %q is not pinned to a tag", image)
		}
	}
	order := []string{"COPY go.mod go.sum ./", "RUN go mod download", "COPY . .", "RUN CGO_ENABLED=0 go build "}
	pos := -1
	for _, s := range order {
		i := strings.Index(df, s)
		if i < 0 || i < pos {
			t.Errorf("Dockerfile steps out of order or missing: want %q", order)
			break
		}
		pos = i
	}
	m := buildLine.FindStringSubmatch(df)
	if m == nil {
		t.Fatal("no `RUN CGO_ENABLED=0 go build` line")
	}
	build := m[1]
	for _, want := range []string{`-ldflags="-s -w -X main.version=${VERSION}"`, "./cmd/kdelay", "-o bin/kdelay"} {
		if !strings.Contains(build, want) {
			t.Errorf("build line %q lacks %q", build, want)
		}
	}

	final := strings.Join(lines[stageStart:], "\n")
	for _, want := range []string{
		"USER 65532:65532", "EXPOSE 8080", `VOLUME ["/data"]`, `ENTRYPOINT ["/kdelay"]`, `CMD ["run"]`,
		"COPY --from=build /src/bin/kdelay /kdelay", "/etc/ssl/certs/ca-certificates.crt",
	} {
		if !strings.Contains(final, want) {
			t.Errorf("final stage lacks %q", want)
		}
	}

	doc, err := os.ReadFile(deployDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), build) {
		t.Errorf("%s does not quote the Dockerfile build command %q", deployDocPath, build)
	}
}

func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(dockerignorePath)
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			patterns[filepath.Clean(l)] = true
		}
	}
	if !patterns[".git"] {
		t.Error(".dockerignore does not exclude .git")
	}
	for _, needed := range []string{"go.mod", "go.sum", "cmd", "*", "**", "*.go", "**/*.go"} {
		if patterns[needed] {
			t.Errorf(".dockerignore excludes %q, which the build needs", needed)
		}
	}
}
