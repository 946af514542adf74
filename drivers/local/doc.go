// Package local is the host target: a driver that runs commands on the
// machine berth runs on (Kind host). Acquiring opens a session in a working
// directory; releasing ends the session and every process it started, never
// the host.
//
// Start with New and Driver.Acquire (local.go). Commands run through
// os/exec, each in its own process group; cancellation kills the whole group
// and WaitDelay keeps pipes held by grandchildren from hanging (exec.go).
// Release kills what the session left running and confirms it through /proc
// (release.go). The driver declares exec and stream_exec only. Its sandboxes
// implement Workspace, which reports the host name and working directory
// for the local probe (PRB-1).
package local
