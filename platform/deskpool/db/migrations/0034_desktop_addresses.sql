-- Where a desktop is shown (issue 39, Build 3): what the gateway needs to connect (protocol,
-- host, port, and the parameters and credentials of the driver's endpoint), recorded when the
-- desktop becomes ready and again when its driver reports a change, so an opening and the
-- redemption of its token never ask the hypervisor. Sealed by the secret store for
-- desktop.address[<desktop id>].target; valid only for the VM it was read from and the
-- protocol the pool preferred then ('' for the driver's default).
CREATE TABLE desktop_addresses (
    desktop_id   uuid        PRIMARY KEY REFERENCES desktops (id) ON DELETE CASCADE,
    vm_id        text        NOT NULL,
    preference   text        NOT NULL,
    sealed       bytea       NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
