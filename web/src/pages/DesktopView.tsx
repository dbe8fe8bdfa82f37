/** The desktop in the browser (through the gateway), full window. */
import { Link, useParams } from "react-router";

export function DesktopViewPage() {
  const { desktopId = "" } = useParams();
  return (
    <main className="container narrow">
      <h1>Desktop {desktopId}</h1>
      <p>Opening desktops in the browser needs the gateway's connection tokens, which this API does not offer yet.</p>
      <Link to="/my">Back to My desktops</Link>
    </main>
  );
}
