// SPDX-License-Identifier: Apache-2.0
/*
 * xcopy_sessions: several iSCSI initiators (one session each, distinct
 * initiator IQNs) sending EXTENDED COPY (LID1) at the same time with
 * colliding list IDs in every LIST ID USAGE, each verifying its data and its
 * own RECEIVE COPY RESULTS (issue 13: TCMU gives the handler no I_T nexus).
 *
 * usage: xcopy_sessions PORTAL TARGET_IQN [SESSIONS [ROUNDS]]
 *   The target must export LUN 0 and LUN 1, both cowstore LUs of one copy
 *   group, each at least 64 MiB of 512-byte blocks. Written areas: each
 *   session owns 8 MiB of both LUNs.
 *
 * Rounds run in lockstep (a barrier before every round's copies and after
 * its checks); round r uses list ID 1 + r, so no two rounds share one (11b
 * uses list ID 0). Round kinds, by r % 5 (session k's role by k % 4):
 *   0 all-held-one-lu  every session 00b, every command to LUN 0: the
 *                      indistinguishable case. COPY STATUS may say "in
 *                      progress" (polled until it does not); then it must be
 *                      "completed" with the byte count of one of the round's
 *                      copies.
 *   1 one-held         k=0 00b, others 10b/11b, all to LUN 0: session 0's
 *                      COPY STATUS is exactly its own (1st answer).
 *   2 held-per-lu      k=0 00b to LUN 0, k=1 00b to LUN 1, k=2 10b, k=3 11b:
 *                      the LUN tells them apart: exact answers.
 *   3 nothing-held     10b and 11b only: afterwards COPY STATUS for the
 *                      round's list ID must be refused (24/00) on both LUNs.
 *   4 failure-per-lu   k=0 00b to LUN 0 that fails (segment past the end:
 *                      COPY ABORTED), k=1 00b to LUN 1 that succeeds, others
 *                      10b: each sees its own status and FAILED SEGMENT
 *                      DETAILS (sense for k=0, none for k=1).
 * Every copy must be GOOD (except round kind 4's k=0) and is verified by
 * reading source and destination back; OPERATION IN PROGRESS is a failure.
 * Exit 0 only if every check passed; a summary line says what was seen.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#define BLOCK 512u
#define REGION 16384u     /* blocks each session owns on each LUN (8 MiB) */
#define SOURCE 4608u      /* its first SOURCE blocks hold its pattern */
#define DEST_OFF 8192u    /* copies land at region + DEST_OFF */
#define MAX_SEGS 4
#define MAX_SESSIONS 16

struct plan {             /* one session's copy in one round */
	int usage;        /* 0 = 00b hold, 2 = 10b, 3 = 11b */
	int list_id;
	int to;           /* LUN the command goes to */
	int src, dst;     /* LUNs copied from / to */
	int segs;
	uint32_t blocks;  /* per segment */
	int fails;        /* deliberately past the end of the LUN */
};

static const char *portal, *target;
static int nsessions = 4, nrounds = 15;
static unsigned char naa[2][16];
static uint64_t lun_blocks[2];
static pthread_barrier_t barrier;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static int total_copies, total_failures, inprogress_answers, strict_checks, relaxed_checks, refused_checks;

static void say(int k, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&out_mu);
	printf("session %d: ", k);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

static void count(int *counter)
{
	pthread_mutex_lock(&out_mu);
	(*counter)++;
	pthread_mutex_unlock(&out_mu);
}

static int kind_of(int r) { return r % 5; }

static struct plan plan_for(int r, int k)
{
	static const int usage_cycle[4] = {0, 2, 3, 2};
	struct plan p;
	memset(&p, 0, sizeof(p));
	p.segs = 1 + (r + k) % MAX_SEGS;
	/* 256..1000 blocks per segment, never a multiple of the 1 MiB unit */
	p.blocks = 256 + 97u * (uint32_t)((r * 3 + k * 5) % 8);
	p.src = (r + k) % 2;
	p.dst = (r + k + 1) % 2 == 0 ? p.src : !p.src;
	switch (kind_of(r)) {
	case 0: p.usage = 0; p.to = 0; break;
	case 1: p.usage = k == 0 ? 0 : usage_cycle[k % 4] ? usage_cycle[k % 4] : 2; p.to = 0; break;
	case 2: p.usage = (int[]){0, 0, 2, 3}[k % 4]; p.to = k % 2; break;
	case 3: p.usage = k % 2 ? 3 : 2; p.to = k % 2; break;
	case 4:
		p.usage = k < 2 ? 0 : 2;
		p.to = k == 1 ? 1 : 0;
		p.fails = k == 0;
		if (k < 2) p.src = p.dst = p.to;
		break;
	}
	if (kind_of(r) == 2 && k < 2) p.src = p.dst = p.to;
	p.list_id = p.usage == 3 ? 0 : 1 + r;
	return p;
}

static uint64_t plan_bytes(const struct plan *p) { return (uint64_t)p->segs * p->blocks * BLOCK; }

static void put16(unsigned char *b, uint32_t v) { b[0] = v >> 8; b[1] = v; }
static void put64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++) b[i] = v >> (56 - 8 * i);
}
static uint32_t get32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int good(struct scsi_task *t) { return t && t->status == SCSI_STATUS_GOOD; }

static void describe(struct iscsi_context *c, struct scsi_task *t, char *out, size_t n)
{
	if (!t)
		snprintf(out, n, "no task: %s", iscsi_get_error(c));
	else if (t->status == SCSI_STATUS_CHECK_CONDITION)
		snprintf(out, n, "CHECK CONDITION %02x/%02x/%02x", t->sense.key,
			 (t->sense.ascq >> 8) & 0xff, t->sense.ascq & 0xff);
	else
		snprintf(out, n, "status 0x%02x", t->status);
}

static struct iscsi_context *login(int k)
{
	char iqn[128];
	snprintf(iqn, sizeof(iqn), "iqn.2026-12.org.cowstore.e2e:esx-host-%d", k);
	struct iscsi_context *c = iscsi_create_context(iqn);
	if (!c) return NULL;
	iscsi_set_targetname(c, target);
	iscsi_set_session_type(c, ISCSI_SESSION_NORMAL);
	iscsi_set_header_digest(c, ISCSI_HEADER_DIGEST_NONE);
	if (iscsi_full_connect_sync(c, portal, 0) != 0) {
		say(k, "login as %s failed: %s", iqn, iscsi_get_error(c));
		iscsi_destroy_context(c);
		return NULL;
	}
	say(k, "logged in as %s", iqn);
	return c;
}

/* A new session gets a unit attention (power on, reset) on its first command
 * to each LUN; libiscsi's login clears LUN 0's only. */
static int clear_unit_attentions(struct iscsi_context *c, int lun)
{
	for (int i = 0; i < 8; i++) {
		struct scsi_task *t = iscsi_testunitready_sync(c, lun);
		int ok = good(t);
		scsi_free_scsi_task(t);
		if (ok) return 1;
	}
	return 0;
}

/* The LU's 16-byte NAA designator (VPD 0x83, binary, LU association). */
static int read_identity(struct iscsi_context *c, int lun)
{
	struct scsi_task *t = iscsi_inquiry_sync(c, lun, 1, 0x83, 1024);
	int found = 0;
	if (good(t)) {
		const unsigned char *d = t->datain.data;
		int len = t->datain.size;
		for (int off = 4; off + 4 <= len && !found;) {
			int dl = d[off + 3];
			if ((d[off] & 0x0f) == 1 && (d[off + 1] & 0x3f) == 0x03 && dl == 16 &&
			    off + 4 + dl <= len) {
				memcpy(naa[lun], d + off + 4, 16);
				found = 1;
			}
			off += 4 + dl;
		}
	}
	scsi_free_scsi_task(t);
	t = iscsi_readcapacity16_sync(c, lun);
	if (good(t) && t->datain.size >= 12) {
		const unsigned char *d = t->datain.data;
		uint64_t last = 0;
		for (int i = 0; i < 8; i++) last = last << 8 | d[i];
		lun_blocks[lun] = last + 1;
		found = found && get32(d + 8) == BLOCK;
	} else {
		found = 0;
	}
	scsi_free_scsi_task(t);
	return found;
}

static void fill_pattern(unsigned char *b, size_t n, int k, int lun)
{
	uint32_t x = 0x9e3779b9u * (uint32_t)(k * 2 + lun + 1);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		b[i] = (unsigned char)x;
	}
}

static unsigned char *read_range(struct iscsi_context *c, int lun, uint64_t lba, uint32_t blocks)
{
	unsigned char *out = malloc((size_t)blocks * BLOCK);
	for (uint32_t done = 0; out && done < blocks;) {
		uint32_t n = blocks - done > 1024 ? 1024 : blocks - done;
		struct scsi_task *t = iscsi_read16_sync(c, lun, lba + done, n * BLOCK, BLOCK, 0, 0, 0, 0, 0);
		if (!good(t) || t->datain.size != (int)(n * BLOCK)) {
			scsi_free_scsi_task(t);
			free(out);
			return NULL;
		}
		memcpy(out + (size_t)done * BLOCK, t->datain.data, (size_t)n * BLOCK);
		scsi_free_scsi_task(t);
		done += n;
	}
	return out;
}

static struct scsi_task *xcopy(struct iscsi_context *c, const struct plan *p, uint64_t base)
{
	unsigned char buf[16 + 2 * 32 + MAX_SEGS * 28];
	memset(buf, 0, sizeof(buf));
	buf[0] = p->list_id;
	buf[1] = p->usage << 3;
	put16(buf + 2, 64);                     /* two identification CSCDs */
	buf[8] = 0; buf[9] = 0; put16(buf + 10, p->segs * 28);
	for (int i = 0; i < 2; i++) {
		unsigned char *d = buf + 16 + 32 * i;
		int lun = i == 0 ? p->src : p->dst;
		d[0] = 0xe4;
		d[4] = 0x01;                    /* binary */
		d[5] = 0x03;                    /* LU association, NAA */
		d[7] = 16;
		memcpy(d + 8, naa[lun], 16);
		d[29] = 0; d[30] = BLOCK >> 8; d[31] = BLOCK & 0xff;
	}
	for (int s = 0; s < p->segs; s++) {
		unsigned char *d = buf + 16 + 64 + 28 * s;
		uint64_t src = base + 3 + (uint64_t)s * p->blocks;
		uint64_t dst = p->fails ? lun_blocks[p->dst] - 4 : base + DEST_OFF + (uint64_t)s * p->blocks;
		d[0] = 0x02;
		put16(d + 2, 24);
		put16(d + 4, 0);
		put16(d + 6, 1);
		put16(d + 10, p->blocks);
		put64(d + 12, src);
		put64(d + 20, dst);
	}
	struct iscsi_data data = {.size = 16 + 64 + (size_t)p->segs * 28, .data = buf};
	return iscsi_extended_copy_sync(c, p->to, &data);
}

struct copy_status {
	int ok;
	int status;
	unsigned segments;
	uint64_t bytes;
	char err[96];
};

static struct copy_status copy_status(struct iscsi_context *c, int lun, int list_id)
{
	struct copy_status cs;
	memset(&cs, 0, sizeof(cs));
	struct scsi_task *t = iscsi_receive_copy_results_sync(c, lun, SCSI_COPY_RESULTS_COPY_STATUS,
							      list_id, 64);
	if (good(t) && t->datain.size >= 12) {
		const unsigned char *d = t->datain.data;
		cs.ok = 1;
		cs.status = d[4] & 0x7f;
		cs.segments = (unsigned)d[5] << 8 | d[6];
		cs.bytes = (uint64_t)get32(d + 8) << (10 * d[7]);
	} else {
		describe(c, t, cs.err, sizeof(cs.err));
	}
	scsi_free_scsi_task(t);
	return cs;
}

struct session {
	int k;
	struct iscsi_context *c;
	int failures;
};

#define CHECK(cond, ...) do { if (!(cond)) { say(s->k, __VA_ARGS__); s->failures++; } } while (0)

/* What one session's own COPY STATUS must say in round r. */
static void check_own_status(struct session *s, int r, const struct plan *p)
{
	int held_here = 0, k;
	for (k = 0; k < nsessions; k++) {
		struct plan q = plan_for(r, k);
		held_here += q.usage == 0 && q.to == p->to;
	}
	struct copy_status cs = copy_status(s->c, p->to, p->list_id);
	if (held_here == 1) {   /* distinguishable: exactly ours */
		CHECK(cs.ok, "round %d: COPY STATUS for list ID %d refused: %s", r, p->list_id, cs.err);
		if (!cs.ok) return;
		if (p->fails) {
			CHECK(cs.status == 0x02, "round %d: own failed copy reported as status 0x%02x", r, cs.status);
		} else {
			CHECK(cs.status == 0x01 && cs.segments == (unsigned)p->segs && cs.bytes == plan_bytes(p),
			      "round %d: COPY STATUS 0x%02x segs %u bytes %" PRIu64 ", own copy: completed, %d segs, %" PRIu64 " bytes",
			      r, cs.status, cs.segments, cs.bytes, p->segs, plan_bytes(p));
		}
		count(&strict_checks);
		return;
	}
	/* Several held copies with this list ID on this LUN: "in progress" while
	 * any runs, then the last to finish; never failed, never a stranger's. */
	for (int tries = 0; cs.ok && cs.status == 0x00 && tries < 2000; tries++) {
		count(&inprogress_answers);
		usleep(5000);
		cs = copy_status(s->c, p->to, p->list_id);
	}
	CHECK(cs.ok, "round %d: COPY STATUS for list ID %d refused: %s", r, p->list_id, cs.err);
	if (!cs.ok) return;
	int known = 0;
	for (k = 0; k < nsessions; k++) {
		struct plan q = plan_for(r, k);
		known |= q.usage == 0 && q.to == p->to && !q.fails && plan_bytes(&q) == cs.bytes;
	}
	CHECK(cs.status == 0x01 && known,
	      "round %d: COPY STATUS 0x%02x bytes %" PRIu64 " is no held copy of this round on LUN %d",
	      r, cs.status, cs.bytes, p->to);
	count(&relaxed_checks);
}

static void check_failed_segment_details(struct session *s, int r, const struct plan *p)
{
	struct scsi_task *t = iscsi_receive_copy_results_sync(s->c, p->to, SCSI_COPY_RESULTS_FAILED_SEGMENT,
							      p->list_id, 256);
	char err[96];
	describe(s->c, t, err, sizeof(err));
	CHECK(good(t), "round %d: FAILED SEGMENT DETAILS refused: %s", r, err);
	if (good(t)) {
		const unsigned char *d = t->datain.data;
		uint32_t avail = t->datain.size >= 4 ? get32(d) : 0xffffffff;
		if (p->fails)
			CHECK(avail >= 56 + 18 && t->datain.size >= 60 + 18 && (d[60 + 2] & 0x0f) == 0x0a,
			      "round %d: FAILED SEGMENT DETAILS lack our COPY ABORTED (available %u)", r, avail);
		else
			CHECK(avail == 0, "round %d: FAILED SEGMENT DETAILS report a failure (available %u) for our good copy",
			      r, avail);
	}
	scsi_free_scsi_task(t);
}

static void run_round(struct session *s, int r)
{
	struct plan p = plan_for(r, s->k);
	uint64_t base = (uint64_t)s->k * REGION;
	char err[96];

	pthread_barrier_wait(&barrier);          /* everyone sends at once */
	struct scsi_task *t = xcopy(s->c, &p, base);
	describe(s->c, t, err, sizeof(err));
	count(&total_copies);
	if (p.fails) {
		CHECK(t && t->status == SCSI_STATUS_CHECK_CONDITION && t->sense.key == SCSI_SENSE_COPY_ABORTED,
		      "round %d: the copy past the end got %s, not COPY ABORTED", r, err);
	} else {
		CHECK(good(t), "round %d: EXTENDED COPY usage %d%d list ID %d to LUN %d: %s%s", r,
		      p.usage >> 1, p.usage & 1, p.list_id, p.to, err,
		      t && t->sense.ascq == 0x0016 ? " (OPERATION IN PROGRESS: refused for a list ID)" : "");
	}
	int copied = good(t);
	scsi_free_scsi_task(t);
	if (copied) {
		uint32_t n = p.segs * p.blocks;
		unsigned char *a = read_range(s->c, p.src, base + 3, n);
		unsigned char *b = read_range(s->c, p.dst, base + DEST_OFF, n);
		CHECK(a && b && memcmp(a, b, (size_t)n * BLOCK) == 0,
		      "round %d: destination differs from source (%u blocks LUN %d -> LUN %d)", r, n, p.src, p.dst);
		free(a);
		free(b);
	}
	if (p.usage == 0) {
		check_own_status(s, r, &p);
		if (kind_of(r) == 4) check_failed_segment_details(s, r, &p);
	}
	pthread_barrier_wait(&barrier);          /* all copies and status checks done */
	if (kind_of(r) == 3) {                   /* nothing was held with this list ID */
		for (int lun = 0; lun < 2; lun++) {
			struct copy_status cs = copy_status(s->c, lun, 1 + r);
			CHECK(!cs.ok && strstr(cs.err, "05/24/00"),
			      "round %d: COPY STATUS for list ID %d on LUN %d answered (status 0x%02x, %" PRIu64
			      " bytes) though no copy held it: %s", r, 1 + r, lun, cs.status, cs.bytes, cs.err);
			if (!cs.ok) count(&refused_checks);
		}
	}
	pthread_barrier_wait(&barrier);
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	for (int r = 0; r < nrounds; r++) run_round(s, r);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s PORTAL TARGET_IQN [SESSIONS [ROUNDS]]\n", argv[0]);
		return 2;
	}
	portal = argv[1];
	target = argv[2];
	if (argc > 3) nsessions = atoi(argv[3]);
	if (argc > 4) nrounds = atoi(argv[4]);
	if (nsessions < 3 || nsessions > MAX_SESSIONS || nrounds < 5 || nrounds > 250) {
		fprintf(stderr, "need 3..%d sessions and 5..250 rounds\n", MAX_SESSIONS);
		return 2;
	}
	struct session s[MAX_SESSIONS];
	memset(s, 0, sizeof(s));
	for (int k = 0; k < nsessions; k++) {
		s[k].k = k;
		s[k].c = login(k);
		if (!s[k].c) return 1;
		for (int lun = 0; lun < 2; lun++) {
			if (!clear_unit_attentions(s[k].c, lun)) {
				fprintf(stderr, "session %d: LUN %d never became ready\n", k, lun);
				return 1;
			}
		}
	}
	for (int lun = 0; lun < 2; lun++) {
		if (!read_identity(s[0].c, lun)) {
			fprintf(stderr, "LUN %d: no 16-byte NAA designator or not 512-byte blocks\n", lun);
			return 1;
		}
		if (lun_blocks[lun] < (uint64_t)nsessions * REGION) {
			fprintf(stderr, "LUN %d: %" PRIu64 " blocks, need %u\n", lun, lun_blocks[lun],
				nsessions * REGION);
			return 1;
		}
	}
	/* Each session writes its source pattern on both LUNs through its own session. */
	unsigned char *pat = malloc((size_t)SOURCE * BLOCK);
	for (int k = 0; k < nsessions; k++) {
		for (int lun = 0; lun < 2; lun++) {
			fill_pattern(pat, (size_t)SOURCE * BLOCK, k, lun);
			for (uint32_t done = 0; done < SOURCE; done += 1024) {   /* within max transfer */
				uint32_t n = SOURCE - done > 1024 ? 1024 : SOURCE - done;
				struct scsi_task *t = iscsi_write16_sync(s[k].c, lun, (uint64_t)k * REGION + done,
									 pat + (size_t)done * BLOCK, n * BLOCK,
									 BLOCK, 0, 0, 0, 0, 0);
				if (!good(t)) {
					fprintf(stderr, "session %d: writing the pattern on LUN %d failed\n", k, lun);
					return 1;
				}
				scsi_free_scsi_task(t);
			}
		}
	}
	free(pat);
	pthread_barrier_init(&barrier, NULL, nsessions);
	pthread_t th[MAX_SESSIONS];
	for (int k = 0; k < nsessions; k++) pthread_create(&th[k], NULL, session_main, &s[k]);
	for (int k = 0; k < nsessions; k++) pthread_join(th[k], NULL);
	for (int k = 0; k < nsessions; k++) {
		total_failures += s[k].failures;
		iscsi_logout_sync(s[k].c);
		iscsi_destroy_context(s[k].c);
	}
	printf("xcopy_sessions: %d sessions, %d rounds, %d copies; COPY STATUS exact %d, "
	       "shared-list-ID %d (after %d 'in progress' answers), refused-as-unheld %d; failures %d\n",
	       nsessions, nrounds, total_copies, strict_checks, relaxed_checks, inprogress_answers,
	       refused_checks, total_failures);
	return total_failures ? 1 : 0;
}
