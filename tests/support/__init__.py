"""What the test files share: configs and worlds built to order, fakes, a Slurm cluster on
this host, the sandbox's hostile battery. No tests here."""
