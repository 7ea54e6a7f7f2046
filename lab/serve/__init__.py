"""Start-up and the processes of a server: parse, bind, fork under one supervisor, serve, stop."""
