package berth

// AfterSecretCheck makes f run once, after the next successful check of a
// task's secrets at dispatch and before its delivery (tests only).
func AfterSecretCheck(s *System, f func()) {
	s.taskSecrets.mu.Lock()
	s.taskSecrets.afterCheck = f
	s.taskSecrets.mu.Unlock()
}
