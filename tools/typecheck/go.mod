module egress-proxies.local/tools/typecheck

go 1.26
