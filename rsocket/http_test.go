package rsocket_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// httpOverRsockets serves handler on an rsocket listener, wrapped by
// wrap, and returns a client whose transport dials rsockets, and the
// base URL.
func httpOverRsockets(t *testing.T, handler http.Handler, useTLS bool) (*http.Client, string) {
	t.Helper()
	ca, sa, _ := testNet(t)
	l, err := rsocket.Listen("tcp", netip.AddrPortFrom(sa, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	d := &rsocket.Dialer{LocalAddr: netip.AddrPortFrom(ca, 0)}
	tr := &http.Transport{DialContext: d.DialContext}
	scheme := "http"
	var ln net.Listener = l
	if useTLS {
		cert, pool := selfSigned(t, "rsocket.test")
		ln = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: "rsocket.test"}
		scheme = "https"
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, scheme + "://" + l.Addr().String()
}

// selfSigned makes a certificate for name and a pool that trusts it.
func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestHTTPOverRsockets(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "http"
		if useTLS {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			body := strings.Repeat("0123456789abcdef", 1<<14) // 256 KiB, several ring halves
			mux := http.NewServeMux()
			mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "hello over "+r.RemoteAddr)
			})
			mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body) // HTTP/1 reads the body before the reply
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				w.Write(b)
			})
			client, base := httpOverRsockets(t, mux, useTLS)
			for i := range 3 { // the second and third reuse the connection
				resp, err := client.Get(base + "/hello")
				if err != nil {
					t.Fatalf("GET %d: %v", i, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !strings.HasPrefix(string(b), "hello over 10.78.") {
					t.Fatalf("GET %d: %q, %v", i, b, err)
				}
			}
			resp, err := client.Post(base+"/echo", "text/plain", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != body {
				t.Fatalf("POST echoed %d bytes, %v; want %d", len(b), err, len(body))
			}
		})
	}
}
