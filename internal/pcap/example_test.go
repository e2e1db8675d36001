package pcap_test

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/rdmago/rdmago/internal/pcap"
)

func ExampleReader() {
	f, err := os.Open("../../testdata/captures/rping.pcapng")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	ipv4 := 0
	for {
		p, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err) // for example "offset 1234: truncated enhanced packet block"
		}
		if proto, _, err := pcap.Decode(p.LinkType, p.Data); err == nil && proto == pcap.EtherTypeIPv4 {
			ipv4++
		}
	}
	fmt.Println(r.Format(), ipv4, "IPv4 packets")
	// Output: pcapng 41 IPv4 packets
}
