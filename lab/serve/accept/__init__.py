"""How the children of a forked server share connections: the policies of --accept.

all        Tornado's own. The children wait on one listening socket; the one the
           kernel wakes runs an accept loop that takes every connection waiting
           (up to 128), so a burst of 10 often lands 8/2 or 9/1 (tornado issues
           1679 and 2368; Cloudflare's "Why does one NGINX worker take all the
           load?").
fair       A child takes one connection per wake-up and
           stops listening while the work it holds fills its capacity; the next
           connection stays in the kernel's queue for a child that has room. A
           request's share of its process is 1 / lanes, the lanes its mode and
           workload have in one process (each mode's capacity, lab/modes/): a GIL-holding loop in
           threading fills it alone (threads would only take turns on it), a
           sleep takes 1/pool, async nothing. A connection whose request is not
           yet known holds a whole process, for at most ACCEPT_GRACE_S.
reuseport  One SO_REUSEPORT socket per child: the kernel hashes each connection
           to one of them, so the spread is random and blind to load.
dispatch   The default when forked. The parent accepts every connection and
           passes it (SCM_RIGHTS) to the child that holds least of its
           capacity, from the same occupancy as fair, which each child writes
           into shared memory (dispatch.py). No child stops answering: a
           connection never waits for a child to have room, only for its
           event loop. Measured side by side, it spreads as evenly as fair
           with a worst /ping like all's (docs/results.md#accept-policies).

With one server process there is nothing to share and every policy is `all`.

The parent's part of a policy lives here, imported only when that policy is
in use: dispatch.py (the parent that accepts), reuseport.py (the port kept
for the children's own sockets). A child's part is its HTTP server's
(lab/web/httpserver.py: fair's accept loop; lab/web/channel.py: a
dispatched child's end).
"""
