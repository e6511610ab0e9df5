package sandbox

// initServices wires the services built on top of the agent (commands and
// files are set in New).
func (sb *Sandbox) initServices() {}
