#!/usr/bin/perl
# squid's basic-auth helper on a managed proxy: lease credentials and the operator's own.
#
#   squid_lease_auth.pl SECRET_DIR PROXY REVOCATIONS_URL STATE_DIR
#
# SECRET_DIR holds the proxy's credentials Secret: `username` and `password`
# (the operator's: health probes; a VM gets `passwordSha256` instead) and
# `signingKey`. PROXY is `namespace/name`.
# Lease credentials (egress_proxies/leases/credentials.py) are checked here,
# without asking anyone: the signature, the expiry, and the last revocation list
# a child process pulls from REVOCATIONS_URL every second (signed with the key)
# into STATE_DIR. When the API does not answer the last list stays: leases keep
# working until they expire. A REVOCATIONS_URL of `-` checks signature and
# expiry only. Reads "username password" lines (URL-escaped), answers OK or ERR.
# Nothing secret is ever printed: squid logs what a helper writes to stderr.
use strict;
use warnings;
use Digest::SHA qw(hmac_sha256_hex sha256_hex);
use HTTP::Tiny;
use JSON::PP qw(decode_json);
use Time::HiRes qw(time sleep stat);

my ($secret_dir, $proxy, $url, $state_dir) = @ARGV;
die "usage: $0 SECRET_DIR PROXY REVOCATIONS_URL STATE_DIR\n" unless defined $state_dir;
my $POLL_SECONDS = 1;

sub slurp {
    my ($path) = @_;
    open(my $fh, '<', $path) or return undef;
    local $/;
    my $text = <$fh>;
    close($fh);
    $text =~ s/\s+\z//;
    return $text;
}

# squid logs why its helper could not start (the path and the error, never the key).
my $key = slurp("$secret_dir/signingKey") // die "$secret_dir/signingKey: $!\n";
die "$secret_dir/signingKey: empty\n" unless length $key;
my $operator_user = slurp("$secret_dir/username") // '';
my $operator_password = slurp("$secret_dir/password");
my $operator_digest = defined $operator_password ? sha256_hex($operator_password)
    : slurp("$secret_dir/passwordSha256") // '';
my $list = "$state_dir/revocations.$$";

# The poller: a child that lives as long as this helper.
my $parent = $$;
my $poller;
if ($url ne "-") {
    $poller = fork();
    die "cannot fork the revocation poller: $!\n" unless defined $poller;
    if ($poller == 0) {
        my $http = HTTP::Tiny->new(timeout => $POLL_SECONDS, keep_alive => 1);
        while (getppid() == $parent) {
            my $now = int(time());
            my $signature = $now . '.' . hmac_sha256_hex("revocations|$proxy|$now", $key);
            my $reply = $http->get($url, {headers => {'X-Proxy-Signature' => $signature}});
            if ($reply->{status} == 200 && open(my $fh, '>', "$list.tmp")) {
                print {$fh} $reply->{content};
                close($fh);
                rename("$list.tmp", $list);
            }
            sleep($POLL_SECONDS);
        }
        exit 0;
    }
}

my ($seen, %revoked, %renewed, %tokens) = (-1);
my $any_token = 1;    # until a list says which tokens are valid

sub refresh {
    my @stat = stat($list);
    return unless @stat && $stat[9] != $seen;
    $seen = $stat[9];
    my $text = slurp($list) // return;
    my $body = eval { decode_json($text) } or return;
    %revoked = map { $_ => 1 } @{$body->{revoked} || []};
    %renewed = %{$body->{renewed} || {}};
    %tokens = map { $_ => 1 } @{$body->{tokens} || []};
    $any_token = 0;
}

sub unescape {
    my ($text) = @_;
    $text =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;
    return $text;
}

# Compared as digests, so the time taken says nothing about the expected value.
sub same { return sha256_hex($_[0]) eq sha256_hex($_[1]) }

sub allowed {
    my ($user, $password) = @_;
    if ($user eq $operator_user) {
        return length($password) > 0 && sha256_hex($password) eq $operator_digest;
    }
    my ($handle, $expiry, $tag) = $user =~ /\A([0-9a-f]{24})\.([0-9]{1,12})\.([0-9a-z]{4,16})\z/
        or return 0;
    return 0 unless same($password, substr(hmac_sha256_hex("v1|$proxy|$user", $key), 0, 32));
    refresh();
    return 0 if $revoked{$handle};
    my $renewed_end = $renewed{$handle} // 0;
    return 0 if ($renewed_end > $expiry ? $renewed_end : $expiry) < time();
    return 0 unless $any_token || $tokens{$tag};
    return 1;
}

$| = 1;
while (my $line = <STDIN>) {
    chomp $line;
    my ($user, $password) = split(/ /, $line, 2);
    print allowed(unescape($user // ''), unescape($password // '')) ? "OK\n" : "ERR\n";
}
kill('TERM', $poller) if $poller;
unlink($list);
