/** Sessions: open and recent remote desktop connections (the sessions API). */
export function SessionsPage() {
  return (
    <section>
      <h1>Sessions</h1>
      <p>This instance's API does not list sessions yet.</p>
    </section>
  );
}
