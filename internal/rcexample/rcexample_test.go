package rcexample

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

func TestConDataTravelsPackedInNetworkOrder(t *testing.T) {
	c := ConData{Addr: 0x0102030405060708, RKey: 0x090a0b0c, QPNum: 0x0d0e0f10, LID: 0x1112,
		GID: [16]byte{0: 0x20, 15: 0x2f}}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0x11, 0x12,
		0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2f}
	if got := c.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal\n got % x\nwant % x", got, want)
	}
	back, err := ParseConData(want)
	if err != nil || back != c {
		t.Fatalf("ParseConData = %+v, %v; want %+v", back, err, c)
	}
}

func TestParseConDataRejectsWrongLengths(t *testing.T) {
	for _, n := range []int{0, 1, ConDataLen - 1, ConDataLen + 1, 64} {
		if _, err := ParseConData(make([]byte, n)); err == nil {
			t.Errorf("%d bytes parsed", n)
		}
	}
}

// tcpPair returns the two ends of a TCP connection over loopback, whose
// socket buffers hold a write that the peer has not read yet, as
// sock_sync_data needs.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestSyncDataExchangesBothWays(t *testing.T) {
	a, b := tcpPair(t)
	done := make(chan []byte, 1)
	go func() {
		got, err := SyncData(b, []byte("from b"))
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	got, err := SyncData(a, []byte("from a"))
	if err != nil || string(got) != "from b" {
		t.Errorf("a got %q, %v", got, err)
	}
	if got := <-done; string(got) != "from a" {
		t.Errorf("b got %q", got)
	}
}

func TestSyncDataReportsAPeerThatCloses(t *testing.T) {
	a, b := tcpPair(t)
	b.Close() // hang up without answering
	if _, err := SyncData(a, []byte("Q")); !errors.Is(err, io.EOF) {
		t.Errorf("SyncData with a peer gone = %v, want io.EOF", err)
	}
}

func FuzzParseConData(f *testing.F) {
	f.Add((&ConData{Addr: 1 << 40, RKey: 7, QPNum: 0x11, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}).Marshal())
	f.Add([]byte{})
	f.Add(make([]byte, ConDataLen+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConData(b)
		if err != nil {
			return
		}
		if again := c.Marshal(); !bytes.Equal(again, b) {
			t.Fatalf("round trip\n got % x\nwant % x", again, b)
		}
	})
}
