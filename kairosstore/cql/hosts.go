package cql

// Host is one Cassandra node as the driver sees it, for the status page.
type Host struct {
	Address    string `json:"address"`
	DataCenter string `json:"datacenter"`
	Rack       string `json:"rack"`
	Up         bool   `json:"up"`
}

// Hosts lists the nodes the driver knows of, with their up/down state as
// its events and reconnections last left it: nothing is sent to the nodes.
func (e *Engine) Hosts() []Host {
	e.mu.RLock()
	sess := e.ks
	if sess == nil {
		sess = e.boot
	}
	e.mu.RUnlock()
	if sess == nil {
		return nil
	}
	var out []Host
	for _, h := range sess.GetHosts() {
		out = append(out, Host{Address: h.ConnectAddressAndPort(), DataCenter: h.DataCenter(), Rack: h.Rack(), Up: h.IsUp()})
	}
	return out
}
