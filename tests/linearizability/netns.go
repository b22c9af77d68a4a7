package main

// Network namespaces for the partition scenarios: the coordinator and every
// server in a namespace of its own, each with one end of a veth pair whose
// other end is on a bridge in this (the root) namespace; the clients (this
// program) talk to them from the root namespace through the bridge's
// address. A partition is made with blackhole routes, on both sides of
// every path it cuts: in the cut-off server's namespace towards the
// coordinator, the other servers or the bridge's address (the clients), and
// in theirs (for the clients: the root namespace's) towards it. Which paths
// a partition cuts is its shape (partitionShape). Everything is named after
// this process's PID and removed at the end.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

type netns struct {
	prefix string // short, unique to this run: names of namespaces, links
	subnet string // "10.213.N"
	bridge string
	names  []string // namespaces: coordinator first, then servers
	ips    []string // their addresses
	blocks [][2]int // blackhole routes in place: (namespace index, target index)
}

// clientsIdx stands for the root namespace, where the clients run, in
// block: its address on the bridge is the subnet's .1.
const clientsIdx = -1

// nsArgs is ip's namespace argument for index i (none for the root
// namespace).
func (n *netns) nsArgs(i int) []string {
	if i == clientsIdx {
		return nil
	}
	return []string{"-n", n.names[i]}
}

// ip is index i's address.
func (n *netns) ip(i int) string {
	if i == clientsIdx {
		return n.subnet + ".1"
	}
	return n.ips[i]
}

var (
	nsMu   sync.Mutex
	nsLive *netns
	// nsSeq numbers the scenarios of this run that made namespaces.
	nsSeq int
)

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsOptions plans a namespace per role (not yet created: the returned
// function creates them) and sets the cluster's listen addresses.
func netnsOptions(o clusterOptions) (clusterOptions, func() error, error) {
	if os.Geteuid() != 0 {
		return o, nil, fmt.Errorf("the partition scenario needs root (ip netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return o, nil, fmt.Errorf("the partition scenario needs ip (iproute2): %v", err)
	}
	// A prefix of its own per scenario: a namespace's veth pair may
	// outlive `ip netns del` for a while (the kernel tears namespaces
	// down in the background), so the next scenario must not reuse names.
	id := os.Getpid() % 10000
	nsSeq++
	n := &netns{prefix: fmt.Sprintf("lz%d%c", id, 'a'+rune(nsSeq%26)), subnet: fmt.Sprintf("10.213.%d", id%250+1)}
	n.bridge = n.prefix + "br"
	n.names = append(n.names, n.prefix+"c")
	n.ips = append(n.ips, n.subnet+".2")
	for i := 0; i < o.servers; i++ {
		n.names = append(n.names, fmt.Sprintf("%ss%d", n.prefix, i))
		n.ips = append(n.ips, fmt.Sprintf("%s.%d", n.subnet, 10+i))
	}
	o.coordListen, o.coordNetns = n.ips[0], n.names[0]
	o.listen, o.netns = n.ips[1:], n.names[1:]
	return o, func() error {
		nsMu.Lock()
		nsLive = n
		nsMu.Unlock()
		return n.create()
	}, nil
}

func (n *netns) create() error {
	// The subnet must be nobody else's.
	if out, err := exec.Command("ip", "-4", "addr").Output(); err == nil && strings.Contains(string(out), n.subnet+".") {
		return fmt.Errorf("subnet %s.0/24 is already in use", n.subnet)
	}
	steps := [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.subnet + ".1/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	}
	for i, name := range n.names {
		host, peer := fmt.Sprintf("%sh%d", n.prefix, i), fmt.Sprintf("%sp%d", n.prefix, i)
		steps = append(steps,
			[]string{"netns", "add", name},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", name},
			[]string{"link", "set", host, "master", n.bridge},
			[]string{"link", "set", host, "up"},
			[]string{"-n", name, "link", "set", "lo", "up"},
			[]string{"-n", name, "link", "set", peer, "name", "eth0"},
			[]string{"-n", name, "addr", "add", n.ips[i] + "/24", "dev", "eth0"},
			[]string{"-n", name, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	// Every namespace answers on the bridge before anything starts.
	deadline := time.Now().Add(5 * time.Second)
	for i := range n.names {
		for {
			if exec.Command("ping", "-c", "1", "-W", "1", n.ips[i]).Run() == nil {
				break
			}
			if _, err := exec.LookPath("ping"); err != nil {
				break // no ping here: the cluster's start will tell
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("namespace %s does not answer at %s", n.names[i], n.ips[i])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// block adds a blackhole route in namespace from towards namespace to
// (indexes into names: 0 the coordinator, 1+i server i; or clientsIdx,
// the root namespace, where the clients run).
func (n *netns) block(from, to int) error {
	args := append(n.nsArgs(from), "route", "add", "blackhole", n.ip(to)+"/32")
	if err := ipCmd(args...); err != nil {
		return err
	}
	n.blocks = append(n.blocks, [2]int{from, to})
	return nil
}

func (n *netns) healAll() error {
	var first error
	for _, b := range n.blocks {
		args := append(n.nsArgs(b[0]), "route", "del", "blackhole", n.ip(b[1])+"/32")
		if err := ipCmd(args...); err != nil && first == nil {
			first = err
		}
	}
	n.blocks = nil
	return first
}

// cleanupNetns removes every namespace, link and route this run made.
func cleanupNetns() {
	nsMu.Lock()
	n := nsLive
	nsLive = nil
	nsMu.Unlock()
	if n == nil {
		return
	}
	// The root namespace's routes (partition-clients) do not go with the
	// namespaces.
	_ = n.healAll()
	for i, name := range n.names {
		// Deleting the host end removes the pair at once; the namespace's
		// own teardown would take it only later.
		_ = exec.Command("ip", "link", "del", fmt.Sprintf("%sh%d", n.prefix, i)).Run()
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
}

// partitionShape says which of the victim's paths a partition cuts.
type partitionShape struct {
	coordinator bool // to and from the coordinator
	servers     bool // to and from every other server (its backups, its peers)
	clients     bool // to and from the clients (the root namespace)
	what        string
}

// partitionShapes, by scenario name.
var partitionShapes = map[string]partitionShape{
	"partition": {coordinator: true, servers: true,
		what: "cut off from the coordinator and the %d other servers; its clients still reach it"},
	"partition-backups": {servers: true,
		what: "cut off from the %d other servers (its backups); the coordinator and its clients still reach it"},
	"partition-coordinator": {coordinator: true,
		what: "cut off from the coordinator; the %d other servers and its clients still reach it"},
	"partition-clients": {clients: true,
		what: "cut off from its clients; the coordinator and the %d other servers still reach it"},
	"sc-partition": {servers: true,
		what: "cut off from the %d other servers (its symmetric-caching group and its backups); the coordinator and its clients still reach it"},
}

// partitionFault cuts the master of the most keys off from what the
// scenario's shape says (partitionShapes) for -pause, then heals the
// partition. Meanwhile focus clients work on its keys through it. If it
// exits once healed (declared dead), it is started again.
func partitionFault(s *scenario, shape partitionShape) {
	nsMu.Lock()
	n := nsLive
	nsMu.Unlock()
	if n == nil {
		s.fault("no namespaces")
		return
	}
	for r := 0; r < s.cfg.rounds; r++ {
		at := s.roundStart(r)
		s.sleepUntil(at)
		v, nk := s.victim()
		srv := s.cl.servers[v]
		stopFocus := s.focusOn(v, r, s.cfg.pause+time.Second)
		var cut []int
		if shape.coordinator {
			cut = append(cut, 0)
		}
		if shape.servers {
			for other := 1; other < len(n.names); other++ {
				if other != v+1 {
					cut = append(cut, other)
				}
			}
		}
		if shape.clients {
			cut = append(cut, clientsIdx)
		}
		var err error
		for _, other := range cut {
			if err = n.block(v+1, other); err == nil {
				err = n.block(other, v+1)
			}
			if err != nil {
				break
			}
		}
		if err != nil {
			s.fault("cannot partition %s: %v", srv.name, err)
		} else {
			s.inject("partition: %s (master of %d of %d keys) "+shape.what,
				srv.name, nk, s.cfg.work.keys, len(s.cl.servers)-1)
		}
		s.watchRecovery(srv.respAddr(), s.rec.start.Add(at+s.cfg.pause))
		s.sleepUntil(at + s.cfg.pause)
		if err := n.healAll(); err != nil {
			s.fault("cannot heal the partition: %v", err)
			return
		}
		s.fault("partition healed")
		stopFocus()
		time.Sleep(2 * time.Second)
		if srv.running() {
			s.fault("%s still runs 2 s after the partition healed", srv.name)
			continue
		}
		s.fault("%s exited after the partition healed", srv.name)
		if err := srv.start(s.cl.exe); err != nil {
			s.fault("cannot restart %s: %v", srv.name, err)
			return
		}
		s.fault("restarted %s on its data directory (pid %d)", srv.name, srv.pid())
	}
}
