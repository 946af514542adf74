package runnerload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// defaultRunnersPerSim is Config.RunnersPerSim's default: a simulated
// runner holds about five descriptors (its connection, state lock,
// journal, outbox segment and ack file), and a process may open 20,000
// here (ulimit -n, soft and hard).
const defaultRunnersPerSim = 2500

// sims are the simulated runners' processes: launches go to them in turn,
// at most per runners each.
type sims struct {
	procs []*simProc
	next  int
	per   int
	mu    sync.Mutex

	linesMu sync.Mutex
	tasks   []simLine
	summary simSummary
}

type simProc struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	inMu     sync.Mutex
	stderr   strings.Builder
	readDone chan error
	closed   bool
}

// startSims starts ceil(sessions/per) processes of bin, state under dir.
func startSims(bin, dir string, sessions, per int) (*sims, error) {
	s := &sims{per: per}
	for i := range (sessions + per - 1) / per {
		p := &simProc{readDone: make(chan error, 1)}
		p.cmd = exec.Command(bin, filepath.Join(dir, "runners"+strconv.Itoa(i)))
		in, err := p.cmd.StdinPipe()
		if err != nil {
			return s, err
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return s, err
		}
		p.in, p.cmd.Stderr = in, &p.stderr
		if err := p.cmd.Start(); err != nil {
			return s, fmt.Errorf("runnerload: start %s: %w", bin, err)
		}
		s.procs = append(s.procs, p)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var l simLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					p.readDone <- err
					return
				}
				s.linesMu.Lock()
				if l.Summary != nil {
					sm := l.Summary
					s.summary.Runners += sm.Runners
					s.summary.Failed += sm.Failed
					s.summary.CPU += sm.CPU
					s.summary.MaxRSS += sm.MaxRSS
					s.summary.Errors = append(s.summary.Errors, sm.Errors...)
				} else {
					s.tasks = append(s.tasks, l)
				}
				s.linesMu.Unlock()
			}
			p.readDone <- sc.Err()
		}()
	}
	return s, nil
}

// launch hands l to the next process.
func (s *sims) launch(l launch) error {
	s.mu.Lock()
	p := s.procs[s.next%len(s.procs)]
	s.next++
	s.mu.Unlock()
	b, _ := json.Marshal(l)
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, err := p.in.Write(append(b, '\n'))
	return err
}

// close ends every process's stdin (its runners stop) and waits for it.
func (s *sims) close() error {
	var errs []error
	for _, p := range s.procs {
		if p.closed {
			continue
		}
		p.closed = true
		p.in.Close()
		rerr := <-p.readDone
		if werr := p.cmd.Wait(); werr != nil {
			errs = append(errs, fmt.Errorf("runnerload: runnersim: %v: %s", werr, p.stderr.String()))
		} else if rerr != nil {
			errs = append(errs, rerr)
		}
	}
	return errors.Join(errs...)
}

// kill kills the processes not closed yet, then closes them.
func (s *sims) kill() {
	for _, p := range s.procs {
		if !p.closed && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
		}
	}
	_ = s.close()
}
