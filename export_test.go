package berth

// AfterSecretCheck makes f run once, after the next successful check of a
// task's secrets at dispatch and before its delivery (tests only).
func AfterSecretCheck(s *System, f func()) {
	s.secrets.mu.Lock()
	s.secrets.afterCheck = f
	s.secrets.mu.Unlock()
}
