/* Version reporting and the process-wide setup of the MySQL client library. */
#include "internal.h"

#include <mysql.h>
#include <pthread.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;

const char *shard_version(void)
{
    return SHARD_VERSION_STRING;
}

unsigned shard_version_num(void)
{
    return SHARD_VERSION_NUM;
}

static void do_init(void)
{
    init_result = mysql_library_init(0, NULL, NULL) ? SHARD_EINTERNAL : SHARD_OK;
}

int shard_global_init(void)
{
    pthread_once(&init_once, do_init);
    if (init_result)
        return shard__fail(init_result, "mysql_library_init failed");
    return SHARD_OK;
}

void shard_global_cleanup(void)
{
    mysql_library_end();
}
