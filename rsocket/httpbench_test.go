package rsocket_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rdmago/rdmago/rsocket"
)

// The net/http benchmarks serve HTTP/1.1 on an rsocket listener and on a
// TCP listener, both on 127.0.0.1, with clients that differ only in how
// their transports dial; one run gives the ratio:
//
//	go test -run '^$' -bench HTTP ./rsocket

// httpBenchClient serves handler over rsockets or TCP on 127.0.0.1, and
// returns a client whose transport dials the same, and the base URL.
func httpBenchClient(b *testing.B, useTCP bool, handler http.Handler) (*http.Client, string) {
	b.Helper()
	var l net.Listener
	var err error
	tr := &http.Transport{}
	if useTCP {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		var d net.Dialer
		tr.DialContext = d.DialContext
	} else {
		l, err = rsocket.Listen("tcp", "127.0.0.1:0")
		var d rsocket.Dialer
		tr.DialContext = d.DialContext
	}
	if err != nil {
		b.Skip("no listener: ", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		if err := <-done; err != http.ErrServerClosed {
			b.Errorf("Serve: %v", err)
		}
	})
	return &http.Client{Transport: tr, Timeout: time.Minute}, "http://" + l.Addr().String()
}

func httpTransports(b *testing.B, handler http.Handler, f func(b *testing.B, client *http.Client, base string)) {
	b.Run("rsocket", func(b *testing.B) {
		client, base := httpBenchClient(b, false, handler)
		f(b, client, base)
	})
	b.Run("tcp", func(b *testing.B) {
		client, base := httpBenchClient(b, true, handler)
		f(b, client, base)
	})
}

// BenchmarkHTTPGet times GETs of a 64-byte body on a kept-alive
// connection: one op is one request and its response.
func BenchmarkHTTPGet(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 64)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body)
	})
	httpTransports(b, handler, func(b *testing.B, client *http.Client, base string) {
		get := func() {
			resp, err := client.Get(base + "/small")
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != int64(len(body)) {
				b.Fatalf("GET read %d bytes, %v; want %d", n, err, len(body))
			}
		}
		get() // connect before the clock starts
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			get()
		}
	})
}

// BenchmarkHTTPPost64MiB times POSTs of a 64 MiB body, which the server
// reads to the end before it answers.
func BenchmarkHTTPPost64MiB(b *testing.B) {
	const size = 64 << 20
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil || n != size {
			http.Error(w, "short body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	payload := make([]byte, size)
	httpTransports(b, handler, func(b *testing.B, client *http.Client, base string) {
		b.SetBytes(size)
		b.ResetTimer()
		for range b.N {
			resp, err := client.Post(base+"/upload", "application/octet-stream", bytes.NewReader(payload))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b.Fatalf("POST: %s", resp.Status)
			}
		}
	})
}
