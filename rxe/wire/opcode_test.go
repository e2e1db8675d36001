package wire

import "testing"

func TestOpCodeTableMatchesIBTA(t *testing.T) {
	// Each row: opcode, name, header length (BTH + extended headers), and
	// which of payload / first / last it has.
	tests := []struct {
		op                   OpCode
		name                 string
		hdr                  int
		payload, first, last bool
	}{
		{RCSendFirst, "RC_SEND_FIRST", 12, true, true, false},
		{RCSendMiddle, "RC_SEND_MIDDLE", 12, true, false, false},
		{RCSendLast, "RC_SEND_LAST", 12, true, false, true},
		{RCSendLastWithImmediate, "RC_SEND_LAST_WITH_IMMEDIATE", 16, true, false, true},
		{RCSendOnly, "RC_SEND_ONLY", 12, true, true, true},
		{RCSendOnlyWithImmediate, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, true, true, true},
		{RCWriteFirst, "RC_RDMA_WRITE_FIRST", 28, true, true, false},
		{RCWriteMiddle, "RC_RDMA_WRITE_MIDDLE", 12, true, false, false},
		{RCWriteLast, "RC_RDMA_WRITE_LAST", 12, true, false, true},
		{RCWriteLastWithImmediate, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true, false, true},
		{RCWriteOnly, "RC_RDMA_WRITE_ONLY", 28, true, true, true},
		{RCWriteOnlyWithImmediate, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true, true, true},
		{RCReadRequest, "RC_RDMA_READ_REQUEST", 28, false, true, true},
		{RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", 16, true, true, false},
		{RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, true, false, false},
		{RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", 16, true, false, true},
		{RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", 16, true, true, true},
		{RCAcknowledge, "RC_ACKNOWLEDGE", 16, false, true, true},
		{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", 24, false, true, true},
		{RCCompareSwap, "RC_COMPARE_SWAP", 40, false, true, true},
		{RCFetchAdd, "RC_FETCH_ADD", 40, false, true, true},
		{RCSendLastWithInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", 16, true, false, true},
		{RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", 16, true, true, true},
		{RCFlush, "RC_FLUSH", 32, false, true, true},
		{RCAtomicWrite, "RC_ATOMIC_WRITE", 28, true, true, true},
		{UCSendFirst, "UC_SEND_FIRST", 12, true, true, false},
		{UCSendMiddle, "UC_SEND_MIDDLE", 12, true, false, false},
		{UCSendLast, "UC_SEND_LAST", 12, true, false, true},
		{UCSendLastWithImmediate, "UC_SEND_LAST_WITH_IMMEDIATE", 16, true, false, true},
		{UCSendOnly, "UC_SEND_ONLY", 12, true, true, true},
		{UCSendOnlyWithImmediate, "UC_SEND_ONLY_WITH_IMMEDIATE", 16, true, true, true},
		{UCWriteFirst, "UC_RDMA_WRITE_FIRST", 28, true, true, false},
		{UCWriteMiddle, "UC_RDMA_WRITE_MIDDLE", 12, true, false, false},
		{UCWriteLast, "UC_RDMA_WRITE_LAST", 12, true, false, true},
		{UCWriteLastWithImmediate, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true, false, true},
		{UCWriteOnly, "UC_RDMA_WRITE_ONLY", 28, true, true, true},
		{UCWriteOnlyWithImmediate, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true, true, true},
		{UDSendOnly, "UD_SEND_ONLY", 20, true, true, true},
		{UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, true, true, true},
		{CNP, "CNP", 28, false, true, true},
		{XRCSendFirst, "XRC_SEND_FIRST", 16, true, true, false},
		{XRCSendMiddle, "XRC_SEND_MIDDLE", 16, true, false, false},
		{XRCSendLast, "XRC_SEND_LAST", 16, true, false, true},
		{XRCSendLastWithImmediate, "XRC_SEND_LAST_WITH_IMMEDIATE", 20, true, false, true},
		{XRCSendOnly, "XRC_SEND_ONLY", 16, true, true, true},
		{XRCSendOnlyWithImmediate, "XRC_SEND_ONLY_WITH_IMMEDIATE", 20, true, true, true},
		{XRCWriteFirst, "XRC_RDMA_WRITE_FIRST", 32, true, true, false},
		{XRCWriteMiddle, "XRC_RDMA_WRITE_MIDDLE", 16, true, false, false},
		{XRCWriteLast, "XRC_RDMA_WRITE_LAST", 16, true, false, true},
		{XRCWriteLastWithImmediate, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 20, true, false, true},
		{XRCWriteOnly, "XRC_RDMA_WRITE_ONLY", 32, true, true, true},
		{XRCWriteOnlyWithImmediate, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 36, true, true, true},
		{XRCReadRequest, "XRC_RDMA_READ_REQUEST", 32, false, true, true},
		{XRCReadResponseFirst, "XRC_RDMA_READ_RESPONSE_FIRST", 16, true, true, false},
		{XRCReadResponseMiddle, "XRC_RDMA_READ_RESPONSE_MIDDLE", 12, true, false, false},
		{XRCReadResponseLast, "XRC_RDMA_READ_RESPONSE_LAST", 16, true, false, true},
		{XRCReadResponseOnly, "XRC_RDMA_READ_RESPONSE_ONLY", 16, true, true, true},
		{XRCAcknowledge, "XRC_ACKNOWLEDGE", 16, false, true, true},
		{XRCAtomicAcknowledge, "XRC_ATOMIC_ACKNOWLEDGE", 24, false, true, true},
		{XRCCompareSwap, "XRC_COMPARE_SWAP", 44, false, true, true},
		{XRCFetchAdd, "XRC_FETCH_ADD", 44, false, true, true},
		{XRCSendLastWithInvalidate, "XRC_SEND_LAST_WITH_INVALIDATE", 20, true, false, true},
		{XRCSendOnlyWithInvalidate, "XRC_SEND_ONLY_WITH_INVALIDATE", 20, true, true, true},
	}
	seen := map[OpCode]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen[tt.op] = true
			op := tt.op
			if !op.Valid() {
				t.Fatalf("%#x not valid", uint8(op))
			}
			if got := op.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if got := op.HeaderLen(); got != tt.hdr {
				t.Errorf("HeaderLen() = %d, want %d", got, tt.hdr)
			}
			if op.HasPayload() != tt.payload || op.IsFirst() != tt.first || op.IsLast() != tt.last {
				t.Errorf("payload/first/last = %v/%v/%v, want %v/%v/%v",
					op.HasPayload(), op.IsFirst(), op.IsLast(), tt.payload, tt.first, tt.last)
			}
			if op.IsOnly() != (tt.first && tt.last) {
				t.Errorf("IsOnly() = %v", op.IsOnly())
			}
			if op.IsMiddle() != (!tt.first && !tt.last) {
				t.Errorf("IsMiddle() = %v", op.IsMiddle())
			}
		})
	}
	for i := 0; i < 256; i++ {
		if op := OpCode(i); op.Valid() && !seen[op] {
			t.Errorf("opcode %s (%#x) valid but not in the table test", op, i)
		}
	}
}

func TestOpCodeTransportRules(t *testing.T) {
	for i := 0; i < 256; i++ {
		op := OpCode(i)
		if !op.Valid() {
			if op.String() == "" || op.HeaderLen() != 0 {
				t.Errorf("invalid %#x: String %q HeaderLen %d", i, op, op.HeaderLen())
			}
			continue
		}
		switch op.Transport() {
		case TransportUD:
			if op != UDSendOnly && op != UDSendOnlyWithImmediate {
				t.Errorf("UD allows only SEND_ONLY(_IMM), table has %s", op)
			}
			if !op.HasDETH() {
				t.Errorf("%s lacks DETH", op)
			}
		case TransportUC:
			if op.IsReadRequest() || op.IsReadResponse() || op.IsAtomic() || op.IsAck() {
				t.Errorf("UC has no READ, atomics or ACKs, table has %s", op)
			}
		case TransportXRC:
			// RC's operations, requests with an XRCETH, responses
			// as RC's; no FLUSH or ATOMIC WRITE.
			rc := op&0x1f | OpCode(TransportRC)
			if !rc.Valid() || rc == RCFlush || rc == RCAtomicWrite {
				t.Errorf("%s has no RC counterpart", op)
			}
			if op.HasXRCETH() != op.IsRequest() {
				t.Errorf("%s: XRCETH %v, request %v", op, op.HasXRCETH(), op.IsRequest())
			}
			xrceth := 0
			if op.HasXRCETH() {
				xrceth = XRCETHLen
			}
			if op.HeaderLen() != rc.HeaderLen()+xrceth || op.HasPayload() != rc.HasPayload() ||
				op.IsFirst() != rc.IsFirst() || op.IsLast() != rc.IsLast() || op.IsSend() != rc.IsSend() ||
				op.IsWrite() != rc.IsWrite() || op.IsAtomic() != rc.IsAtomic() || op.IsAck() != rc.IsAck() ||
				op.HasImmDt() != rc.HasImmDt() || op.HasIETH() != rc.HasIETH() || op.HasRETH() != rc.HasRETH() ||
				op.HasAETH() != rc.HasAETH() || op.HasAtomicETH() != rc.HasAtomicETH() || op.HasAtomicAckETH() != rc.HasAtomicAckETH() {
				t.Errorf("%s is not laid out as %s plus an XRCETH", op, rc)
			}
		case TransportRC, TransportCNP:
			if op.HasXRCETH() {
				t.Errorf("%s carries an XRCETH", op)
			}
		default:
			t.Errorf("%s: transport %s not supported", op, op.Transport())
		}
		if op.IsRequest() == op.IsResponse() && op != CNP {
			t.Errorf("%s: IsRequest %v IsResponse %v", op, op.IsRequest(), op.IsResponse())
		}
	}
}

func TestPSNComparesAcrossWrap(t *testing.T) {
	tests := []struct {
		p, q PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xffffff, 1},
		{0xffffff, 0, -1},
		{5, 0xfffffa, 11},
		{0x7fffff, 0, 0x7fffff},
		{0x800000, 0, -0x800000},
	}
	for _, tt := range tests {
		if got := tt.p.Diff(tt.q); got != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.p, tt.q, got, tt.diff)
		}
		if got := tt.p.Less(tt.q); got != (tt.diff < 0) {
			t.Errorf("%#x.Less(%#x) = %v", tt.p, tt.q, got)
		}
		if got := tt.p.LessEq(tt.q); got != (tt.diff <= 0) {
			t.Errorf("%#x.LessEq(%#x) = %v", tt.p, tt.q, got)
		}
	}
	if got := PSN(0xfffffe).Add(3); got != 1 {
		t.Errorf("0xfffffe+3 = %#x, want 1", got)
	}
	if !PSN(2).InWindow(0xfffffe, 5) || PSN(3).InWindow(0xfffffe, 5) || !PSN(0xfffffe).InWindow(0xfffffe, 1) {
		t.Error("InWindow wrong across the wrap")
	}
}

func TestSyndromeDecodesKindsAndTables(t *testing.T) {
	tests := []struct {
		s    Syndrome
		kind SyndromeKind
		str  string
	}{
		{0x1f, KindACK, "ACK credits=unlimited"},
		{0x00, KindACK, "ACK credits=0"},
		{0x0e, KindACK, "ACK credits=128"},
		{RNRNAKSyndrome(12), KindRNRNAK, "RNR_NAK timer=12"},
		{NAKPSNSequenceError, KindNAK, "NAK PSN_SEQ_ERR"},
		{NAKInvalidRequest, KindNAK, "NAK INVALID_REQUEST"},
		{NAKRemoteAccessError, KindNAK, "NAK REMOTE_ACCESS_ERR"},
		{NAKRemoteOperational, KindNAK, "NAK REMOTE_OPERATIONAL_ERR"},
		{NAKInvalidRDRequest, KindNAK, "NAK INVALID_RD_REQUEST"},
		{0x6a, KindNAK, "NAK code=10"},
		{0x45, KindReserved, "RESERVED syndrome=0x45"},
	}
	for _, tt := range tests {
		if tt.s.Kind() != tt.kind || tt.s.String() != tt.str {
			t.Errorf("%#x: kind %d %q, want %d %q", uint8(tt.s), tt.s.Kind(), tt.s, tt.kind, tt.str)
		}
	}
	if d := RNRTimerDuration(0); d.Microseconds() != 655360 {
		t.Errorf("RNR timer 0 = %v", d)
	}
	if d := RNRTimerDuration(12); d.Microseconds() != 640 { // ibv_rc_pingpong's min_rnr_timer
		t.Errorf("RNR timer 12 = %v", d)
	}
	if c := ACKSyndrome(14).Credits(); c != 128 {
		t.Errorf("credit code 14 = %d", c)
	}
}
