package schematest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for test servers are taken below the kernel's ephemeral range. A port
// that bind(":0") found free is free only until the server binds it; in
// between, any outgoing connection on the machine may be given it as its
// local port, and tests make many (nats-servers dialling routes not up yet,
// clients reconnecting to a server a test stopped). CI saw a third
// nats-server of a cluster never start that way. Below the ephemeral range,
// only another listener can take the port, and a port is never handed out
// twice by one test process.
const lowestTestPort = 20000

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ephemeralStart is the first port of the kernel's ephemeral range, or 0 if
// it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

func freeTCPPort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if top := ephemeralStart(); top > lowestTestPort+1000 {
		for range 200 {
			port := lowestTestPort + rand.IntN(top-lowestTestPort)
			if handedOut.ports[port] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			l.Close()
			handedOut.ports[port] = true
			return port, nil
		}
	}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("free port: the kernel gave only ports handed out already")
}
