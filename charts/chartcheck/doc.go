// Package chartcheck checks the kdelay Helm chart (charts/kdelay): it renders
// the chart with `helm template` and verifies that the manifests decode
// strictly into Kubernetes objects and carry the fields kdelay depends on.
// It also keeps the values table of the chart README in sync with the "# --"
// comments of values.yaml.
//
// It is a separate Go module so that the kdelay module does not depend on the
// Kubernetes libraries. Run it with `bash charts/check.sh`, or directly with
// `go test ./...` in this directory (helm must be on PATH or in
// $(go env GOPATH)/bin; without it the tests skip, or fail when CI=true).
package chartcheck
