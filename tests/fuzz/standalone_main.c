/* Replays a libFuzzer corpus through LLVMFuzzerTestOneInput without libFuzzer, so that gcc
 * builds (and the ASan run) check every parser against the saved inputs. Usage: prog DIR|FILE...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            continue; /* an absent corpus is an empty one */
        if (!S_ISDIR(st.st_mode)) {
            failures += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            failures += replay_file(path);
            files++;
        }
        if (d)
            closedir(d);
    }
    /* Always exercise the empty input and a few fixed patterns too. */
    static const uint8_t fixed[][8] = {{0}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
    LLVMFuzzerTestOneInput(fixed[0], 0);
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        LLVMFuzzerTestOneInput(fixed[i], sizeof(fixed[i]));
    printf("replayed %d corpus files, %d unreadable\n", files, failures);
    return failures ? 1 : 0;
}
