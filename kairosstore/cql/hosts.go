package cql

// Host is one Cassandra node as the driver sees it, for the status page.
type Host struct {
	Address    string `json:"address"`
	DataCenter string `json:"datacenter"`
	Rack       string `json:"rack"`
	Up         bool   `json:"up"`
}

// Status is the Cassandra engine's part of the status page.
type Status struct {
	Hosts []Host `json:"hosts"`
	// InFlightLimit is the adaptive limit of requests in flight now;
	// QueueTimeouts the requests that found no slot under it within
	// --cassandra.queue-timeout since the engine opened.
	InFlightLimit int    `json:"in_flight_limit"`
	QueueTimeouts uint64 `json:"queue_timeouts"`
}

// Status reads the driver's hosts and the in-flight limit.
func (e *Engine) Status() Status {
	l := e.limit
	l.mu.Lock()
	timeouts := l.saturated
	l.mu.Unlock()
	return Status{Hosts: e.Hosts(), InFlightLimit: l.Limit(), QueueTimeouts: uint64(timeouts)}
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
