package config

import (
	"os"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestREADMEFlagTable holds README's configuration table to the flags
// --help lists: the same flags in the same order, each with the YAML key
// it is read from and its default as --help prints it, and every YAML key
// one that the file decoder accepts.
func TestREADMEFlagTable(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| flag | YAML key | default |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.SplitN(strings.TrimPrefix(line, "|"), "|", 4)
		require.GreaterOrEqual(t, len(cells), 4, "README row %q", line)
		for i := range cells[:3] {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		rows = append(rows, cells[:3])
	}
	require.NotEmpty(t, rows, "README has no flag table")

	app := kingpin.New("test", "")
	app.Terminate(nil)
	_, _, err = ParseCommand(app, nil)
	require.NoError(t, err)
	var want [][]string
	for _, f := range app.Model().Flags {
		if f.Name == "help" || f.Hidden {
			continue
		}
		key := ""
		if f.Name != "config.file" {
			key = yamlKey(f.Name)
		}
		want = append(want, []string{"--" + f.Name, key, strings.Join(f.Default, ",")})
	}
	require.Equal(t, want, rows, "README's flag table (flag, YAML key, default) against --help")

	// Every YAML key of the table is one LoadFile accepts.
	out, err := yaml.Marshal(Default())
	require.NoError(t, err)
	var doc map[string]map[string]any
	require.NoError(t, yaml.Unmarshal(out, &doc))
	for _, r := range want[1:] {
		section, key, _ := strings.Cut(r[1], ".")
		if sub, nested, ok := strings.Cut(key, "."); ok {
			require.Contains(t, doc[section][sub], nested, r[0])
			continue
		}
		require.Contains(t, doc[section], key, r[0])
	}
}
