package main

// A minimal RESP2 client: one connection, one command at a time, a deadline
// per command. Enough for GET, SET, INCR, DEL, SHOAL.LOCAL and INFO.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// reply is one decoded RESP reply. Kind is '+', '-', ':', '$' or '*'.
type reply struct {
	Kind  byte
	Str   string // simple string, error text or bulk string
	Int   int64
	Nil   bool // a nil bulk string or nil array
	Items []reply
}

// errorReply is a "-ERR ..." reply: the server answered, with an error.
type errorReply struct{ msg string }

func (e *errorReply) Error() string { return e.msg }

type respConn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func dialRESP(addr string, timeout time.Duration) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &respConn{addr: addr, c: c, r: bufio.NewReader(c)}, nil
}

func (rc *respConn) Close() { _ = rc.c.Close() }

// Do sends one command and reads its reply within timeout. A network error
// or timeout is returned as an error (the connection must then be dropped);
// an error reply comes back as *errorReply, and the connection stays usable.
func (rc *respConn) Do(timeout time.Duration, args ...string) (reply, error) {
	if err := rc.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return reply{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		return reply{}, err
	}
	rep, err := readReply(rc.r, 0)
	if err != nil {
		return reply{}, err
	}
	if rep.Kind == '-' {
		return rep, &errorReply{rep.Str}
	}
	return rep, nil
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", errors.New("protocol error: line without CRLF")
	}
	return line[:len(line)-2], nil
}

func readReply(r *bufio.Reader, depth int) (reply, error) {
	if depth > 8 {
		return reply{}, errors.New("protocol error: nesting too deep")
	}
	line, err := readLine(r)
	if err != nil {
		return reply{}, err
	}
	if line == "" {
		return reply{}, errors.New("protocol error: empty line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', '-':
		return reply{Kind: kind, Str: rest}, nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("protocol error: bad integer %q", rest)
		}
		return reply{Kind: kind, Int: n}, nil
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil || n > 64<<20 {
			return reply{}, fmt.Errorf("protocol error: bad bulk length %q", rest)
		}
		if n < 0 {
			return reply{Kind: kind, Nil: true}, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return reply{}, err
		}
		return reply{Kind: kind, Str: string(buf[:n])}, nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil || n > 1<<20 {
			return reply{}, fmt.Errorf("protocol error: bad array length %q", rest)
		}
		if n < 0 {
			return reply{Kind: kind, Nil: true}, nil
		}
		items := make([]reply, 0, n)
		for i := 0; i < n; i++ {
			it, err := readReply(r, depth+1)
			if err != nil {
				return reply{}, err
			}
			items = append(items, it)
		}
		return reply{Kind: kind, Items: items}, nil
	}
	return reply{}, fmt.Errorf("protocol error: unknown reply type %q", kind)
}
