// Package session keeps moat's sessions: live boxes with a persistent interpreter,
// each owned by one principal, kept alive between calls and destroyed when they are
// deleted, idle too long, too old, or when their box dies. It knows nothing of boxes
// beyond the Box interface (internal/box.Session satisfies it); the engine starts
// the boxes and runs the calls.
//
//	st, err := session.New[box.Session](session.Options{Dir: "/var/lib/moat/sessions", Log: log})
//	go st.Run(ctx) // the sweeper
//	defer st.Close()
//
//	slot, err := st.Reserve(owner, maxPerOwner) // *LimitError when full
//	b, err := backend.StartSession(ctx, spec)   // slow: outside the store's lock
//	if err != nil {
//		slot.Cancel()
//		return err
//	}
//	info, err := slot.Commit(session.Info{Language: "python"}, b) // info.ID: "s_..."
//
//	b, release, err := st.Acquire(owner, id) // ErrBusy while another call runs
//	res, err := b.Exec(ctx, call)
//	release(true)
//
// # Ownership
//
// Every method takes the owner. Another owner's session is ErrNotFound, exactly as a
// session that never existed, so an id reveals nothing to anyone else; ids are "s_"
// and 128 random bits, so they cannot be guessed either.
//
// # Lifetime
//
// A session ends when:
//
//   - its owner deletes it (Delete): its box is closed, even during a call, which
//     then fails;
//   - it has been idle for its IdleTTL (default 10 minutes), counted from the end of
//     its last call or file operation (Acquire to release), or from its creation; a
//     busy session never expires this way;
//   - it reaches its MaxLifetime (default 1 hour) after creation, busy or not: its
//     box is closed under the running call;
//   - its box dies on its own (Done is closed: killed after a stuck interrupt, out of
//     memory): a goroutine per session watches for it;
//   - the store is closed.
//
// Run's sweeper checks the expiry every few seconds, and Get, Acquire and List check
// the sessions they touch, so a session is never used past its time. Info.ExpiresAt
// is the earlier of LastUsed+IdleTTL and CreatedAt+MaxLifetime. A session may ask
// for a shorter IdleTTL or MaxLifetime than the store's, never a longer one.
//
// Whoever removes a session from the store (under its lock) closes its box, after
// unlocking: so every box is closed exactly once, even one that died on its own (its
// Close releases what is left), and a slow Close never blocks the store.
//
// # Lost sessions
//
// A session that ended other than by Delete or Close leaves a tombstone: for 24
// hours (at most 10000, the oldest dropped first) its owner gets a *LostError from
// Get and Acquire, with a reason a client can show ("expired after 10m0s idle",
// "reached its maximum lifetime of 1h0m0s", "the box died: ...", "the server
// restarted; the session's state is gone"), instead of a bare ErrNotFound. Deleting a
// lost session forgets it.
//
// # Restarts
//
// With Options.Dir set, each live session has a record, Dir/<id>.json holding its id,
// owner and creation time (0600, in a 0700 dir), written by Commit and removed when
// the session ends by Delete, expiry or its box's death. Close keeps them, and a
// process that dies without Close (a crash, kill -9) leaves them behind too: the next
// New turns each into a tombstone with the restart reason and removes it. The records hold no session state: a box does not survive its
// server, only the news of its loss does.
//
// Records are opened with O_CREATE|O_EXCL and O_NOFOLLOW and checked to be regular
// files, and Dir itself must not be a symbolic link, so a link planted in Dir cannot
// make the server write, read or remove a file elsewhere. A malformed record is
// logged and removed, never fatal. Dir must belong to one server process: New
// consumes every record in it.
package session
