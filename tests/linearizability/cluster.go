package main

// A Shoal cluster on this machine, one process per role, started by this
// program so that it knows (and may signal) every PID: a coordinator and N
// servers, each with its own data directory and fixed ports, so that a
// server killed or the whole cluster killed can be started again on the
// same directories and ports.

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one role's process: how to start it and, while it runs, its PID.
type proc struct {
	name string
	args []string
	dir  string
	// netns, if set, is the network namespace it runs in (ip netns exec).
	netns string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) start(exe string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited:
			p.cmd = nil // exited on its own: start it again
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(p.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	if p.netns != "" {
		// ip netns exec execs the command in place: the PID is shoal's own.
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.netns, exe}, p.args...)...)
	} else {
		cmd = exec.Command(exe, p.args...)
	}
	cmd.Stdout = log
	cmd.Stderr = log
	// Our children die with us, whatever way we exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("cannot start %s: %w", p.name, err)
	}
	log.Close()
	p.cmd = cmd
	done := make(chan struct{})
	p.exited = done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to this process only (by its PID), if it runs.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process (resuming it first if stopped) and reaps it.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "linz: %s (pid %d) did not exit after SIGKILL\n", p.name, cmd.Process.Pid)
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// stopGracefully sends SIGCONT and SIGTERM, then SIGKILL after a grace period.
func (p *proc) stopGracefully(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		p.mu.Lock()
		p.cmd = nil
		p.mu.Unlock()
	case <-time.After(grace):
		p.kill()
	}
}

type serverProc struct {
	proc
	native, resp, backup int
	listen               string // address it listens on
}

func (s *serverProc) respAddr() string { return net.JoinHostPort(s.listen, strconv.Itoa(s.resp)) }

type cluster struct {
	exe         string
	root        string
	coordAddr   string
	coordinator *proc
	servers     []*serverProc
	replicas    int
}

var usedPorts sync.Map

// freePort picks a port of 127.0.0.1 that nothing listens on, outside the
// ranges shoal's own tests pick from (20000-31999) and the kernel's
// ephemeral range, and never the same twice in this run.
func freePort() (int, error) {
	for i := 0; i < 2000; i++ {
		port := 12000 + rand.Intn(8000)
		if _, dup := usedPorts.LoadOrStore(port, true); dup {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port in 12000-19999")
}

type clusterOptions struct {
	servers  int
	replicas int
	memory   string
	logLevel string
	syncOpen bool
	// serverArgs go to every server's command line (after the others).
	serverArgs []string
	// listen[i], if set, is server i's address (in its namespace), and
	// netns[i] the namespace; coordListen likewise for the coordinator.
	listen      []string
	netns       []string
	coordListen string
	coordNetns  string
}

func newCluster(exe, root string, o clusterOptions) (*cluster, error) {
	c := &cluster{exe: exe, root: root, replicas: o.replicas}
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	chost := "127.0.0.1"
	if o.coordListen != "" {
		chost = o.coordListen
	}
	c.coordAddr = net.JoinHostPort(chost, strconv.Itoa(cport))
	// The cluster secret every process proves on control and replication
	// connections (docs/security.md): 32 random bytes as hex, mode 0600.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	secret := filepath.Join(root, "cluster-secret")
	raw := make([]byte, 32)
	if _, err := crand.Read(raw); err != nil {
		return nil, err
	}
	if err := os.WriteFile(secret, []byte(hex.EncodeToString(raw)+"\n"), 0o600); err != nil {
		return nil, err
	}
	cdir := filepath.Join(root, "coordinator")
	c.coordinator = &proc{
		name:  "coordinator",
		dir:   cdir,
		netns: o.coordNetns,
		args: []string{"coordinator", "--listen", c.coordAddr, "--data-dir", filepath.Join(cdir, "state"),
			"--replicas", strconv.Itoa(o.replicas), "--log-level", o.logLevel, "--cluster-secret-file", secret},
	}
	for i := 0; i < o.servers; i++ {
		s := &serverProc{listen: "127.0.0.1"}
		if i < len(o.listen) && o.listen[i] != "" {
			s.listen = o.listen[i]
		}
		if i < len(o.netns) {
			s.netns = o.netns[i]
		}
		for _, p := range []*int{&s.native, &s.resp, &s.backup} {
			if *p, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.name = fmt.Sprintf("server-%d", i)
		s.dir = filepath.Join(root, s.name)
		s.args = []string{"server", "--coordinator", c.coordAddr, "--listen", s.listen,
			"--data-dir", filepath.Join(s.dir, "data"),
			"--native-port", strconv.Itoa(s.native), "--resp-port", strconv.Itoa(s.resp),
			"--memcached-port", "0",
			"--backup-port", strconv.Itoa(s.backup), "--memory", o.memory,
			"--backup-buffers", "8", "--log-level", o.logLevel, "--cluster-secret-file", secret}
		if o.syncOpen {
			s.args = append(s.args, "--sync-open")
		}
		s.args = append(s.args, o.serverArgs...)
		c.servers = append(c.servers, s)
	}
	return c, nil
}

// start starts the coordinator, waits until it answers, then every server,
// and waits until the cluster is ready.
func (c *cluster) start(timeout time.Duration) error {
	if err := c.coordinator.start(c.exe); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		if _, err := c.getMap(); err == nil {
			break
		}
		if !c.coordinator.running() {
			return fmt.Errorf("the coordinator exited; see %s/log", c.coordinator.dir)
		}
		if time.Now().After(deadline) {
			return errors.New("the coordinator did not answer in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range c.servers {
		if err := s.start(c.exe); err != nil {
			return err
		}
	}
	return c.waitReady(time.Until(deadline))
}

// stop stops every process of the cluster (SIGTERM, then SIGKILL).
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		wg.Add(1)
		go func(s *serverProc) { defer wg.Done(); s.stopGracefully(5 * time.Second) }(s)
	}
	wg.Wait()
	c.coordinator.stopGracefully(5 * time.Second)
}

type clusterMap struct {
	Version  uint64 `json:"version"`
	Replicas int    `json:"replicas"`
	Servers  []struct {
		ID    uint64 `json:"id"`
		Resp  string `json:"resp"`
		State string `json:"state"`
	} `json:"servers"`
	Tablets []struct {
		Table  uint64 `json:"table"`
		Master uint64 `json:"master"`
	} `json:"tablets"`
	Recoveries []json.RawMessage `json:"recoveries"`
}

// getMap asks the coordinator for the cluster map (control protocol:
// a u32 little-endian length, then JSON).
func (c *cluster) getMap() (*clusterMap, error) {
	conn, err := net.DialTimeout("tcp", c.coordAddr, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	body := []byte(`{"op":"get_map"}`)
	frame := make([]byte, 4+len(body))
	binary.LittleEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	if _, err := conn.Write(frame); err != nil {
		return nil, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > 16<<20 {
		return nil, fmt.Errorf("control frame of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, err
	}
	var ans struct {
		Reply   string     `json:"reply"`
		Map     clusterMap `json:"map"`
		Message string     `json:"message"`
	}
	if err := json.Unmarshal(buf, &ans); err != nil {
		return nil, err
	}
	if ans.Reply != "map" {
		return nil, fmt.Errorf("coordinator answered %s: %s", ans.Reply, ans.Message)
	}
	return &ans.Map, nil
}

// waitReady waits until every running server is up in the map (a running
// server that the map only knows as down, a zombie, is left out), no
// recovery is in progress, and every running server answers on its Redis
// port.
func (c *cluster) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		m, err := c.getMap()
		if err == nil {
			state := map[string]string{} // by Redis address: up wins over the rest, down loses
			for _, s := range m.Servers {
				if st, ok := state[s.Resp]; !ok || s.State == "up" || st == "down" {
					state[s.Resp] = s.State
				}
			}
			up, running, zombies := 0, 0, 0
			for _, s := range c.servers {
				if !s.running() {
					continue
				}
				switch state[s.respAddr()] {
				case "up":
					up++
					running++
				case "down":
					zombies++
				default:
					running++
				}
			}
			last = fmt.Sprintf("%d of %d servers up (%d more running but declared dead), %d recoveries",
				up, running, zombies, len(m.Recoveries))
			if up >= running && len(m.Recoveries) == 0 {
				ok := true
				for _, s := range c.servers {
					if !s.running() || state[s.respAddr()] == "down" {
						continue
					}
					rc, err := dialRESP(s.respAddr(), 300*time.Millisecond)
					if err != nil {
						ok = false
						last = fmt.Sprintf("%s: %v", s.name, err)
						break
					}
					_, err = rc.Do(time.Second, "PING")
					rc.Close()
					if err != nil {
						ok = false
						last = fmt.Sprintf("%s: %v", s.name, err)
						break
					}
				}
				if ok {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster was not ready in time (%s)", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// masterOf tells which running server masters key: the one whose Redis
// port, after SHOAL.LOCAL (no forwarding), answers a GET of it without
// TRYAGAIN. -1 if none does.
func (c *cluster) masterOf(key string) int {
	for i, s := range c.servers {
		if !s.running() {
			continue
		}
		rc, err := dialRESP(s.respAddr(), 300*time.Millisecond)
		if err != nil {
			continue
		}
		_, err = rc.Do(time.Second, "SHOAL.LOCAL")
		if err == nil {
			_, err = rc.Do(time.Second, "GET", key)
		}
		rc.Close()
		if err == nil {
			return i
		}
		var er *errorReply
		if errors.As(err, &er) && !strings.HasPrefix(er.msg, "TRYAGAIN") {
			return i
		}
	}
	return -1
}
