"""The cluster engine: SCOUT and every baseline on verl (GPU nodes; config and data structures are
tested on CPU against the installed verl)."""
