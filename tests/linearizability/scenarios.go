package main

import (
	"sync"
	"syscall"
	"time"
)

// watchRecovery notes in the fault log when the map first shows a server
// at resp as down (one that was not down when it was called) and when no
// recovery is left, until deadline.
func (s *scenario) watchRecovery(resp string, deadline time.Time) {
	wasDown := map[uint64]bool{}
	if m, err := s.cl.getMap(); err == nil {
		for _, sv := range m.Servers {
			if sv.State == "down" {
				wasDown[sv.ID] = true
			}
		}
	}
	sawDown, sawRecovery := false, false
	for time.Now().Before(deadline) {
		m, err := s.cl.getMap()
		if err == nil {
			for _, sv := range m.Servers {
				if sv.Resp == resp && sv.State == "down" && !wasDown[sv.ID] && !sawDown {
					sawDown = true
					s.fault("the coordinator declared %s dead (map version %d)", resp, m.Version)
				}
			}
			if len(m.Recoveries) > 0 {
				sawRecovery = true
			} else if sawRecovery {
				s.fault("recovery finished (map version %d)", m.Version)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// roundStart is when round r's fault is injected: rounds are -pause plus
// 3 s of settling apart.
func (s *scenario) roundStart(r int) time.Duration {
	return s.cfg.faultAt + time.Duration(r)*(s.cfg.pause+settle)
}

const settle = 3 * time.Second

// kill: SIGKILL the master of the most keys; start it again (on the same
// data directory and ports) after -pause. Once per round.
func killScenario(s *scenario) {
	for r := 0; r < s.cfg.rounds; r++ {
		at := s.roundStart(r)
		s.sleepUntil(at)
		v, n := s.victim()
		srv := s.cl.servers[v]
		pid := srv.pid()
		srv.kill()
		s.inject("SIGKILL %s (pid %d, master of %d of %d keys)", srv.name, pid, n, s.cfg.work.keys)
		s.watchRecovery(srv.respAddr(), s.rec.start.Add(at+s.cfg.pause))
		s.sleepUntil(at + s.cfg.pause)
		if err := srv.start(s.cl.exe); err != nil {
			s.fault("cannot restart %s: %v", srv.name, err)
			return
		}
		s.fault("restarted %s on its data directory (pid %d)", srv.name, srv.pid())
	}
}

// zombie: SIGSTOP the master of the most keys for -pause, then SIGCONT.
// Connections to it stay open (the roaming clients' timeout is longer than
// the pause; pinned clients reconnect to it), so clients are served by it
// again once it resumes. If it then exits, it is started again on its data
// directory before the next round.
func zombieScenario(s *scenario) {
	for r := 0; r < s.cfg.rounds; r++ {
		at := s.roundStart(r)
		s.sleepUntil(at)
		v, n := s.victim()
		srv := s.cl.servers[v]
		stopFocus := s.focusOn(v, r, s.cfg.pause+time.Second)
		if err := srv.signal(syscall.SIGSTOP); err != nil {
			s.fault("cannot SIGSTOP %s: %v", srv.name, err)
			return
		}
		s.inject("SIGSTOP %s (pid %d, master of %d of %d keys)", srv.name, srv.pid(), n, s.cfg.work.keys)
		s.watchRecovery(srv.respAddr(), s.rec.start.Add(at+s.cfg.pause))
		s.sleepUntil(at + s.cfg.pause)
		if err := srv.signal(syscall.SIGCONT); err != nil {
			s.fault("cannot SIGCONT %s: %v", srv.name, err)
			return
		}
		s.fault("SIGCONT %s", srv.name)
		// Say what became of the zombie.
		time.Sleep(time.Second)
		stopFocus()
		time.Sleep(time.Second)
		if srv.running() {
			s.fault("%s still runs 2 s after SIGCONT", srv.name)
			continue
		}
		s.fault("%s exited after SIGCONT", srv.name)
		if err := srv.start(s.cl.exe); err != nil {
			s.fault("cannot restart %s: %v", srv.name, err)
			return
		}
		s.fault("restarted %s on its data directory (pid %d)", srv.name, srv.pid())
	}
}

// restart: SIGKILL every server and the coordinator at once; a second
// later start them all again on the same data directories and ports.
// Once per round.
func restartScenario(s *scenario) {
	for r := 0; r < s.cfg.rounds; r++ {
		s.sleepUntil(s.roundStart(r))
		var wg sync.WaitGroup
		procs := []*proc{s.cl.coordinator}
		for _, srv := range s.cl.servers {
			procs = append(procs, &srv.proc)
		}
		for _, p := range procs {
			wg.Add(1)
			go func(p *proc) { defer wg.Done(); p.kill() }(p)
		}
		wg.Wait()
		s.inject("SIGKILL the coordinator and all %d servers", len(s.cl.servers))
		time.Sleep(time.Second)
		if err := s.cl.coordinator.start(s.cl.exe); err != nil {
			s.fault("cannot restart the coordinator: %v", err)
			return
		}
		for _, srv := range s.cl.servers {
			if err := srv.start(s.cl.exe); err != nil {
				s.fault("cannot restart %s: %v", srv.name, err)
			}
		}
		s.fault("restarted the coordinator and %d servers on their data directories", len(s.cl.servers))
		start := time.Now()
		if err := s.cl.waitReady(30 * time.Second); err != nil {
			s.fault("not ready: %v", err)
			return
		}
		s.fault("the cluster serves again (%.1f s after the restart)", time.Since(start).Seconds())
	}
}

// focusOn starts -focus more clients, pinned to server v and working on
// the keys it masters now, and -readers pipelined readers of those keys on
// connections to v, until the returned function is called (or for at most
// d). Round r makes the clients' SET values unique.
func (s *scenario) focusOn(v, r int, d time.Duration) func() {
	var mine []string
	for k := 0; k < s.cfg.work.keys; k++ {
		if s.cl.masterOf(keyName(k)) == v {
			mine = append(mine, keyName(k))
		}
	}
	if len(mine) == 0 || s.cfg.focus+s.cfg.readers == 0 {
		return func() {}
	}
	stop := make(chan struct{})
	both := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-s.stop:
		}
		close(both)
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.cfg.work.focus(s.cl, s.rec, v, mine, s.cfg.focus, 1000+100*r, both, time.Now().Add(d))
	}()
	for i := 0; i < s.cfg.readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipelinedReader(s.cl, s.rec, v, mine, s.cfg.readInterval, 1000, both, time.Now().Add(d))
		}()
	}
	time.Sleep(20 * time.Millisecond)
	var once sync.Once
	return func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
}

// partition, partition-backups, partition-coordinator, partition-clients:
// see netns.go.
func partitionScenario(name string) func(s *scenario) {
	return func(s *scenario) { partitionFault(s, partitionShapes[name]) }
}
