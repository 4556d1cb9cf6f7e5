package io.github.kdelay;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The Java blocks of docs/producing.md (and of README.md, when it has any)
 * marked
 * {@code <!-- tested: PATH -->} are the tested code: every line of such a
 * block (trimmed; blank lines aside) is a line of the test source PATH, in
 * the same order. The test may have more lines in between (its own headers,
 * its bookkeeping), never other ones in their place.
 */
class DocsSpringTest {
  private static final Pattern MARK = Pattern.compile("^<!-- tested: (\\S+) -->$");

  private static Path repo() {
    String d = System.getProperty("kdelay.repo.dir");
    return Path.of(d != null ? d : "../..");
  }

  @Test
  void producingDocBlocksAreTheTestedCode() throws IOException {
    assertTrue(check("docs/producing.md") >= 2, "docs/producing.md, Spring Kafka: fewer than 2 blocks marked <!-- tested: ... -->");
  }

  @Test
  void readmeBlocksAreTheTestedCode() throws IOException {
    check("README.md");
  }

  /** Checks every marked block of the file; returns how many there are. */
  private static int check(String file) throws IOException {
    List<String> lines = Files.readAllLines(repo().resolve(file));
    int blocks = 0;
    for (int i = 0; i < lines.size(); i++) {
      Matcher m = MARK.matcher(lines.get(i).trim());
      if (!m.matches()) continue;
      String where = file + ":" + (i + 1);
      assertEquals("```java", i + 1 < lines.size() ? lines.get(i + 1).trim() : "", where + ": a marked block starts with ```java");
      List<String> block = new ArrayList<>();
      int j = i + 2;
      for (; j < lines.size() && !lines.get(j).trim().equals("```"); j++) {
        block.add(lines.get(j));
      }
      if (j == lines.size()) fail(where + ": block not closed");
      List<String> source = normalize(Files.readAllLines(repo().resolve(m.group(1))));
      List<String> want = normalize(block);
      assertTrue(!want.isEmpty(), where + ": empty block");
      int at = 0;
      for (String line : want) {
        while (at < source.size() && !source.get(at).equals(line)) at++;
        if (at == source.size()) {
          fail(where + ": the line\n  " + line + "\nis not in " + m.group(1) + " (in this order): the docs show code the test does not run");
        }
        at++;
      }
      blocks++;
      i = j;
    }
    return blocks;
  }

  private static List<String> normalize(List<String> in) {
    List<String> out = new ArrayList<>();
    for (String l : in) {
      if (!l.isBlank()) out.add(l.trim());
    }
    return out;
  }
}
