package client

// Following a scorer set: an endpoint "dns+http://NAME:PORT" (or
// dns+https) stands for every address NAME resolves to, looked up again
// every resolve interval, so that a headless service's pods join and
// leave the rotation as they come and go, each balanced on its own (not
// one connection pool behind a ClusterIP). And the health watch: every
// endpoint's /healthz is asked at an interval, and one that fails leaves
// the rotation until its probe passes again.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

const dnsPrefix = "dns+"

// dnsTarget is one followed name.
type dnsTarget struct {
	raw          string // as given
	scheme, host string
	port         string
}

func parseDNSTarget(raw string) (dnsTarget, error) {
	u, err := url.Parse(strings.TrimPrefix(raw, dnsPrefix))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return dnsTarget{}, fmt.Errorf("endpoint %q: want dns+http://NAME:PORT or dns+https://NAME:PORT", raw)
	}
	return dnsTarget{raw: raw, scheme: u.Scheme, host: u.Hostname(), port: u.Port()}, nil
}

// dnsNames lists the followed names (for errors).
func (c *Client) dnsNames() string {
	names := make([]string, len(c.dns))
	for i, d := range c.dns {
		names[i] = d.raw
	}
	if len(names) == 0 {
		return "the endpoint list"
	}
	return strings.Join(names, ", ")
}

// follow resolves the names every resolve interval until Close.
func (c *Client) follow() {
	defer c.wg.Done()
	for sleepCtx(c.ctx, c.cfg.resolveEvery) {
		c.resolve()
	}
}

// resolve looks the names up and makes the endpoints the static ones plus
// one per address found. A name that does not resolve keeps its previous
// addresses (a DNS hiccup does not empty the rotation); an address that
// is gone leaves, its requests in flight finishing where they are.
func (c *Client) resolve() {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	current := map[string]*endpoint{}
	for _, ep := range c.endpoints() {
		current[ep.url] = ep
	}
	want := map[string]bool{}
	var urls []string
	for _, d := range c.dns {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		addrs, err := c.cfg.lookup(ctx, d.host)
		cancel()
		if err != nil {
			c.cfg.log.Warn().Str("name", d.raw).Err(err).Msg("scorer name not resolved; keeping its previous addresses")
			for u, ep := range current {
				if ep.dns == d.raw {
					want[u] = true
					urls = append(urls, u)
				}
			}
			continue
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			u := d.scheme + "://" + net.JoinHostPort(a, d.port)
			if d.scheme == "https" {
				c.tlsNames.Store(net.JoinHostPort(a, d.port), d.host)
			}
			if !want[u] {
				want[u] = true
				urls = append(urls, u)
			}
			if ep := current[u]; ep != nil && ep.dns == "" {
				ep.dns = d.raw
			}
		}
	}
	eps := append([]*endpoint(nil), c.static...)
	isStatic := map[string]bool{}
	for _, ep := range c.static {
		isStatic[ep.url] = true
	}
	added, removed := 0, 0
	for _, u := range urls {
		if isStatic[u] {
			continue
		}
		if len(eps)-len(c.static) >= c.cfg.maxDiscovered {
			c.cfg.log.Warn().Int("max", c.cfg.maxDiscovered).Msg("more scorer addresses than the client follows; the rest are left out")
			break
		}
		ep := current[u]
		if ep == nil {
			ep = c.newEndpoint(u)
			ep.dns = c.dnsOf(u)
			added++
			if c.resolved {
				// A pod that appeared: it takes work once its /healthz
				// passes and it serves the same model (probe).
				ep.healthy.Store(false)
				c.metrics.Healthy.WithLabelValues(u).Set(0)
				ep.probing = true
				c.wg.Add(1)
				go c.probe(ep)
			}
		}
		eps = append(eps, ep)
	}
	for u, ep := range current {
		if !want[u] && !isStatic[u] {
			ep.removed.Store(true)
			c.metrics.Healthy.DeleteLabelValues(u)
			removed++
		}
	}
	if added > 0 || removed > 0 {
		c.cfg.log.Info().Int("added", added).Int("removed", removed).Int("endpoints", len(eps)).Msg("scorer endpoints changed")
	}
	c.setEndpoints(eps)
	c.resolved = true
}

// dnsOf is the followed name whose scheme and port u has.
func (c *Client) dnsOf(u string) string {
	for _, d := range c.dns {
		if strings.HasPrefix(u, d.scheme+"://") && strings.HasSuffix(u, ":"+d.port) {
			return d.raw
		}
	}
	return ""
}

// watchHealth asks every healthy endpoint's /healthz each health
// interval; one that does not answer 200 leaves the rotation at once and
// is probed until it does (a pod whose model broke fails its /healthz
// before a request finds out).
func (c *Client) watchHealth() {
	defer c.wg.Done()
	for sleepCtx(c.ctx, c.cfg.healthInterval) {
		for _, ep := range c.endpoints() {
			if !ep.healthy.Load() {
				continue
			}
			if err := c.checkHealth(ep); err != nil {
				c.markFailure(ep, &attemptError{kind: "health", err: err}, true)
			}
		}
	}
}

// dialTLS dials an https endpoint. An address found under a dns+https name
// is checked against that name (the service's, which its certificate
// carries), not against the pod's IP address; any other address as
// net/http would check it (its host). base is the client's TLS settings.
func (c *Client) dialTLS(base *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if base != nil {
			cfg = base.Clone()
		}
		if cfg.ServerName == "" {
			if name, ok := c.tlsNames.Load(addr); ok {
				cfg.ServerName = name.(string)
			} else if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		d := &tls.Dialer{Config: cfg}
		return d.DialContext(ctx, network, addr)
	}
}
