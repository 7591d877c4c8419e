package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// oomWatch follows the daemon's "oom" and "die" events of moat's containers, so
// that a box's OOM kills are known even when its container, and its memory cgroup,
// are gone by the time moat asks. The daemon's OOMKilled mark does not do for that:
// dockerd 20.10 sets it only at the container's exit, and under runsc not always;
// its "oom" event comes at once, before the "die" event, for runc and runsc alike.
type oomWatch struct {
	mu     sync.Mutex
	boxes  map[string]*oomBox
	cancel context.CancelFunc
	done   chan struct{}
}

// oomBox is what the watch saw of one container.
type oomBox struct {
	ooms int64
	died chan struct{} // closed at its "die" event
}

// oomRetry is how long the watch waits before it subscribes again after the daemon's
// event stream broke.
const oomRetry = time.Second

// watchOOM subscribes to e's events of moat's containers until close. Events from
// the moment it is called on are seen, across broken streams (it resubscribes from
// the last event seen).
func (e *Engine) watchOOM() *oomWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &oomWatch{boxes: map[string]*oomBox{}, cancel: cancel, done: make(chan struct{})}
	since := time.Now()
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			since = w.follow(ctx, e, since)
			select {
			case <-ctx.Done():
			case <-time.After(oomRetry):
			}
		}
	}()
	return w
}

// follow reads one subscription until it breaks, and returns the time of the last
// event it saw (since when there was none).
func (w *oomWatch) follow(ctx context.Context, e *Engine, since time.Time) time.Time {
	res := e.cli.Events(ctx, client.EventsListOptions{
		Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: make(client.Filters).Add("type", string(events.ContainerEventType)).
			Add("label", LabelBox+"=1").Add("event", string(events.ActionOOM)).Add("event", string(events.ActionDie)),
	})
	for {
		select {
		case m := <-res.Messages:
			if m.TimeNano > 0 {
				since = time.Unix(0, m.TimeNano)
			}
			w.saw(m)
		case <-res.Err:
			return since
		}
	}
}

// saw records one event of a tracked container (other moat processes' containers
// on the same daemon are not this watch's). An event seen twice (a resubscription replays from the
// last event's time) is counted twice only for "oom" events of the same
// nanosecond, which a replay of that one event would be; that is left alone: a
// count that is too high still means the box met its limit.
func (w *oomWatch) saw(m events.Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.boxes[m.Actor.ID]
	if b == nil {
		return
	}
	switch m.Action {
	case events.ActionOOM:
		b.ooms++
	case events.ActionDie:
		select {
		case <-b.died:
		default:
			close(b.died)
		}
	}
}

// track starts recording the events of container id; call it before the container
// starts.
func (w *oomWatch) track(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.boxes[id] == nil {
		w.boxes[id] = &oomBox{died: make(chan struct{})}
	}
}

// count returns the OOM events seen of container id (0 when it is not tracked).
func (w *oomWatch) count(id string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.boxes[id]; b != nil {
		return b.ooms
	}
	return 0
}

// awaitDie waits until the "die" event of container id was seen, or timeout: the
// daemon sends its "oom" events before it, so their count is then complete.
func (w *oomWatch) awaitDie(id string, timeout time.Duration) {
	w.mu.Lock()
	b := w.boxes[id]
	w.mu.Unlock()
	if b == nil {
		return
	}
	select {
	case <-b.died:
	case <-time.After(timeout):
	}
}

// forget drops what the watch knows of container id, once it is removed.
func (w *oomWatch) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.boxes, id)
}

// close ends the subscription.
func (w *oomWatch) close() {
	w.cancel()
	<-w.done
}
