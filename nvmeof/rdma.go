package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/rdmacm"
	"github.com/rdmago/rdmago/verbs"
)

// ErrClosed is what operations on a closed controller, namespace or
// target return, and what commands still outstanding when it closed
// end with.
var ErrClosed = errors.New("nvmeof: closed")

// ErrDisconnected wraps the failures of a queue whose connection ended:
// the peer disconnected, or the QP failed (the peer stopped answering).
var ErrDisconnected = errors.New("nvmeof: queue disconnected")

// Work request IDs carry what they are for in their top byte and an
// index below.
const (
	wrSend  = 1 << 56 // a command capsule (host) or a response (target)
	wrRecv  = 2 << 56 // a receive
	wrRead  = 3 << 56 // an RDMA READ of the host's data (target)
	wrWrite = 4 << 56 // an RDMA WRITE (target; unsignaled, seen only on errors)
	wrBind  = 5 << 56 // a window's BIND_MW or LOCAL_INV (host; unsignaled, likewise)
	wrKind  = 0xff << 56
)

// rdmaQueue is the RDMA side of one NVMe queue, host or target: an RC
// connection whose single CQ a goroutine polls, handing each completion
// to handle, and a watch on the connection manager for the peer's
// disconnection. A failed completion, the peer's disconnection or close
// fail the queue once: onFail runs with the cause.
type rdmaQueue struct {
	conn   *rdmacm.Conn
	ctx    context.Context // done once the queue failed or closed
	cancel context.CancelFunc

	handle func(*verbs.WC)
	onFail func(error)

	wg       sync.WaitGroup // the poller and the watch
	work     sync.WaitGroup // what the poller started (a target's workers)
	stopWork func()         // tells those to end, once the poller is gone
	failOnce sync.Once
	mu       sync.Mutex
	err      error
	mrs      []*verbs.MR
}

func newRDMAQueue(conn *rdmacm.Conn) *rdmaQueue {
	q := &rdmaQueue{conn: conn}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q
}

// register registers n bytes on the connection's PD with access.
func (q *rdmaQueue) register(n int, access verbs.AccessFlags) (*verbs.MR, error) {
	mr, err := q.conn.PD.RegMR(make([]byte, n), access)
	if err != nil {
		return nil, err
	}
	q.mrs = append(q.mrs, mr)
	return mr, nil
}

// start runs the poller and the disconnection watch.
func (q *rdmaQueue) start(handle func(*verbs.WC), onFail func(error)) {
	q.handle, q.onFail = handle, onFail
	q.wg.Add(2)
	go q.poll()
	go func() {
		defer q.wg.Done()
		if q.conn.WaitDisconnect(q.ctx) == nil {
			q.fail(fmt.Errorf("%w: the peer disconnected", ErrDisconnected))
		}
	}()
}

func (q *rdmaQueue) poll() {
	defer q.wg.Done()
	cq := q.conn.RecvCQ
	var wcs [32]verbs.WC
	for {
		n, err := cq.Poll(wcs[:])
		if err != nil {
			q.fail(fmt.Errorf("%w: %v", ErrDisconnected, err))
			return
		}
		for i := range wcs[:n] {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				q.fail(fmt.Errorf("%w: %v completion %v", ErrDisconnected, wc.Opcode, wc.Status))
				continue
			}
			q.handle(wc)
		}
		if n == 0 {
			if q.ctx.Err() != nil {
				return
			}
			if cq.Wait(q.ctx) != nil {
				return
			}
		}
	}
}

// fail ends the queue with err (the first cause wins): it disconnects,
// which flushes what is outstanding, and calls onFail.
func (q *rdmaQueue) fail(err error) {
	q.failOnce.Do(func() {
		q.mu.Lock()
		q.err = err
		q.mu.Unlock()
		q.conn.ID.Disconnect() // rdma_disconnect: the QP goes to the error state
		q.cancel()
		if q.onFail != nil {
			q.onFail(err)
		}
	})
}

// failed returns why the queue failed, or nil.
func (q *rdmaQueue) failed() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// close fails the queue with ErrClosed if nothing failed it before,
// waits for its goroutines, deregisters its memory and destroys the
// connection.
func (q *rdmaQueue) close() {
	q.closeWith(func() {
		for _, mr := range q.mrs {
			mr.Dereg()
		}
		q.mrs = nil
	})
}

// closeWith is close with release freeing the memory.
func (q *rdmaQueue) closeWith(release func()) {
	q.fail(ErrClosed)
	q.wg.Wait()
	if q.stopWork != nil {
		q.stopWork()
	}
	q.work.Wait()
	release()
	q.conn.Close()
}

// post posts send work requests, turning a refusal into the queue's
// failure.
func (q *rdmaQueue) post(wrs ...verbs.SendWR) error {
	if err := q.conn.QP.PostSend(wrs); err != nil {
		err = fmt.Errorf("%w: ibv_post_send: %v", ErrDisconnected, err)
		q.fail(err)
		return err
	}
	return nil
}

// postRecv posts a receive of n bytes at off in mr.
func (q *rdmaQueue) postRecv(id uint64, mr *verbs.MR, off, n int) error {
	if err := q.conn.QP.PostRecv([]verbs.RecvWR{{WRID: id, SGList: []verbs.SGE{mr.SGE(off, n)}}}); err != nil {
		err = fmt.Errorf("%w: ibv_post_recv: %v", ErrDisconnected, err)
		q.fail(err)
		return err
	}
	return nil
}
