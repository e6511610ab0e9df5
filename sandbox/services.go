package sandbox

// initServices wires the services built on top of the agent's process
// streams (commands and files are set in New).
func (sb *Sandbox) initServices() {
	sb.Shells = &Shells{sb: sb}
	sb.Python = &Python{sb: sb}
}
