package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// adapterBin is the adapter binary built once by TestMain for all tests.
var adapterBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kairos-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	adapterBin = filepath.Join(dir, "kairos-adapter")
	// The module root is the parent of this package's directory, which is
	// the working directory of a test binary.
	cmd := exec.Command("go", "build", "-o", adapterBin, "..")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the adapter:", err)
		return 1
	}
	return m.Run()
}
