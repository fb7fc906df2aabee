"""What the tests share: real servers on port 0, fakes of third-party APIs, clients, canvas builders and
components written for the tests. Import as `tests.support.<module>`; tests/README.md lists the modules."""
